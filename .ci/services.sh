#!/usr/bin/env bash
# Storage servers for coffer's tests, all on 127.0.0.1:
#   - an S3 server: the Versity gateway (posix backend), with a bucket for the tests;
#   - a TCP fault proxy: toxiproxy, with a proxy named "s3" in front of the gateway;
#   - an SFTP server: OpenSSH's sshd on a high port, key login for the current user;
#   - no server but pinned binaries: restic, borg and kopia, whose repositories coffer's import
#     reads (kopia's own server is started by the import itself, not here);
#   - an SMTP server: mailpit, STARTTLS required with a certificate made at start, and its
#     HTTP API to read back what the agent's notifications sent;
#   - browsers for the web interface's tests: Debian's Chromium, headless, driven through
#     ChromeDriver (the WebDriver server, on loopback), and Debian's Firefox ESR through
#     geckodriver (built from crates.io at a pinned version).
#
# Usage: services.sh install | start | selftest | stop
#   install   builds the pinned Go servers, restic, kopia and mailpit into the cache directory (skipped
#             when already there), installs the Debian OpenSSH packages when sshd is
#             missing, Debian's borgbackup of the pinned version, Debian's chromium and
#             chromium-driver (the pinned version when the archive still has it), and Debian's
#             firefox-esr (likewise) with geckodriver.
#   start     starts the servers in the run directory and writes "$COFFER_CI_RUN/env".
#   selftest  checks that each server really works (needs a started run directory).
#   stop      stops what start started (safe to repeat).
#
# Environment:
#   COFFER_TEST_SKIP groups of tests skipped by name (s3, sftp, toxiproxy, restic, borg, kopia, smtp, browser, firefox; commas or
#                    spaces between them): their servers are neither installed nor started
#                    (the fault proxy needs S3, so skipping s3 skips it too; skipping restic
#                    neither builds it nor exports COFFER_TEST_RESTIC).
#   COFFER_CI_CACHE  where the binaries are kept (default "$HOME/.cache/coffer-ci").
#   COFFER_CI_RUN    the run directory: data, logs, keys, pid files and the env file.
#                    start creates a fresh temporary one when unset and remembers it in
#                    "$COFFER_CI_CACHE/last-run", which selftest and stop then use.
# docs/testing.md describes the variables of the env file.
set -euo pipefail

VERSITYGW_VERSION=v1.8.0
TOXIPROXY_VERSION=v2.12.0
RESTIC_VERSION=v0.19.1
BORG_VERSION=1.2.4
BORG_DEBIAN_VERSION=1.2.4-1
VERSITYGW_MODULE=github.com/versity/versitygw/cmd/versitygw
TOXIPROXY_MODULE=github.com/Shopify/toxiproxy/v2/cmd
RESTIC_MODULE=github.com/restic/restic
KOPIA_VERSION=v0.22.3
KOPIA_MODULE=github.com/kopia/kopia
MAILPIT_VERSION=v1.33.1
# Debian bookworm's Chromium; its security archive keeps only the newest build, so an
# older pin that is gone is replaced by what the archive has (and the version printed).
CHROMIUM_DEBIAN_VERSION=156.0.8078.114-1~deb12u1
MAILPIT_MODULE=github.com/axllent/mailpit
# Debian bookworm's Firefox ESR (its security archive, too, keeps only the newest build), and
# Mozilla's geckodriver from crates.io.
FIREFOX_DEBIAN_VERSION=153.8.0esr-1~deb12u1
GECKODRIVER_VERSION=0.36.0

CACHE=${COFFER_CI_CACHE:-$HOME/.cache/coffer-ci}
BIN=$CACHE/bin
VERSITYGW=$BIN/versitygw-$VERSITYGW_VERSION
TOXIPROXY_SERVER=$BIN/toxiproxy-server-$TOXIPROXY_VERSION
TOXIPROXY_CLI=$BIN/toxiproxy-cli-$TOXIPROXY_VERSION
RESTIC=$BIN/restic-$RESTIC_VERSION
KOPIA=$BIN/kopia-$KOPIA_VERSION
MAILPIT=$BIN/mailpit-$MAILPIT_VERSION
BORG=/usr/bin/borg
CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver
FIREFOX=/usr/bin/firefox-esr
GECKODRIVER=$BIN/geckodriver-$GECKODRIVER_VERSION

# Fixed test credentials: the servers listen on loopback only.
S3_ACCESS_KEY=cofferci
S3_SECRET_KEY=coffer-ci-secret-key
S3_REGION=us-east-1
S3_BUCKET=coffer-test
PROXY_NAME=s3
SMTP_USER=coffer
SMTP_PASSWORD=coffer-ci-smtp-password

# How long (seconds) to wait for a server to answer.
READY_TIMEOUT=${COFFER_CI_READY_TIMEOUT:-30}

# wanted GROUP: true unless COFFER_TEST_SKIP names GROUP (or s3, for the proxy in front of it).
wanted() {
    local name skip=${COFFER_TEST_SKIP:-}
    for name in ${skip//,/ }; do
        name=${name,,}
        [[ $name == "$1" ]] && return 1
        [[ $1 == toxiproxy && $name == s3 ]] && return 1
    done
    return 0
}

say() { printf 'services: %s\n' "$*" >&2; }
die() { printf 'services: error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------- install

# go_install NAME PACKAGE VERSION DEST: builds PACKAGE@VERSION and moves the binary to DEST.
go_install() {
    local name=$1 pkg=$2 version=$3 dest=$4
    if [[ -x $dest ]]; then
        say "$name $version already in $dest"
        return
    fi
    command -v go >/dev/null ||
        die "go is not installed; $name $version is built with the Go toolchain (go install)"
    say "building $name $version (go install $pkg@$version)"
    local tmp t0=$SECONDS
    tmp=$(mktemp -d "$BIN/.build.XXXXXX")
    if ! GOBIN=$tmp go install -trimpath -ldflags='-s -w' "$pkg@$version"; then
        rm -rf "$tmp"
        die "go install $pkg@$version failed"
    fi
    # The binary is named after the package's last path element.
    mv "$tmp/${pkg##*/}" "$dest"
    rm -rf "$tmp"
    say "built $dest in $((SECONDS - t0))s"
}

# go_build_module NAME MODULE VERSION PACKAGE DEST [LDFLAGS]: downloads MODULE@VERSION and
# builds its PACKAGE (a path inside the module, e.g. ./cmd/restic) to DEST inside the module's
# own directory, so that the build uses exactly the module's go.mod and go.sum. LDFLAGS are
# added to the linker's (e.g. -X settings that tell the binary its version).
go_build_module() {
    local name=$1 module=$2 version=$3 pkg=$4 dest=$5 ldflags=${6:-}
    if [[ -x $dest ]]; then
        say "$name $version already in $dest"
        return
    fi
    command -v go >/dev/null ||
        die "go is not installed; $name $version is built with the Go toolchain (go build)"
    say "building $name $version (go mod download $module@$version, go build $pkg)"
    local tmp dir t0=$SECONDS
    tmp=$(mktemp -d "$BIN/.build.XXXXXX")
    # Outside any module, so that the download does not touch a go.mod.
    if ! (cd "$tmp" && GOFLAGS=-mod=mod go mod download "$module@$version"); then
        rm -rf "$tmp"
        die "go mod download $module@$version failed"
    fi
    dir=$(go env GOMODCACHE)/$module@$version
    if ! (cd "$dir" && go build -trimpath -ldflags="-s -w $ldflags" -o "$tmp/$name" "$pkg"); then
        rm -rf "$tmp"
        die "go build $pkg in $dir failed"
    fi
    mv "$tmp/$name" "$dest"
    rm -rf "$tmp"
    say "built $dest in $((SECONDS - t0))s"
}

# apt_install WHAT PACKAGE...: installs Debian packages (PACKAGE may be NAME=VERSION),
# with sudo when not root; no service is started while installing.
apt_install() {
    local what=$1
    shift
    local sudo=()
    if [[ $(id -u) != 0 ]]; then
        if ! { command -v sudo >/dev/null && sudo -n true 2>/dev/null; }; then
            die "$what is missing and this user cannot install it; install the Debian packages $*"
        fi
        sudo=(sudo -n)
    fi
    command -v apt-get >/dev/null || die "$what is missing and there is no apt-get here; install $*"
    say "installing $* (apt-get)"
    # A package may start a system-wide service (sshd on port 22); forbid service starts
    # while installing, unless the machine already has a policy of its own.
    local policy=/usr/sbin/policy-rc.d added_policy=
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
        "${sudo[@]}" chmod 755 "$policy"
        added_policy=1
    fi
    local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q
        -o Dpkg::Options::=--force-confold install --no-install-recommends "$@")
    local ok=1
    # Package lists are often missing or stale on a fresh machine: update once on failure.
    if ! "${apt[@]}"; then
        if ! { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q update && "${apt[@]}"; }; then
            ok=
        fi
    fi
    [[ -n $added_policy ]] && "${sudo[@]}" rm -f "$policy"
    [[ -n $ok ]] || die "apt-get could not install $*"
}

install_sshd() {
    if command -v sshd >/dev/null || [[ -x /usr/sbin/sshd ]]; then
        if command -v sftp >/dev/null && command -v ssh-keygen >/dev/null; then
            say "openssh already installed"
            return
        fi
    fi
    apt_install sshd openssh-server openssh-client
}

# The pinned borg: Debian's package of that version, whose `borg` is /usr/bin/borg.
install_borg() {
    if [[ -x $BORG ]] && [[ $("$BORG" --version 2>/dev/null) == "borg $BORG_VERSION" ]]; then
        say "borg $BORG_VERSION already installed"
        return
    fi
    apt_install borg "borgbackup=$BORG_DEBIAN_VERSION"
}

# Chromium and ChromeDriver, of one version (the driver only drives its own browser).
install_browser() {
    local want=${CHROMIUM_DEBIAN_VERSION%%-*}
    if [[ -x $CHROMIUM ]] && [[ -x $CHROMEDRIVER ]] &&
        [[ $("$CHROMEDRIVER" --version 2>/dev/null) == "ChromeDriver $want "* ]]; then
        say "chromium and chromedriver $want already installed"
        return
    fi
    if ! (apt_install chromium "chromium=$CHROMIUM_DEBIAN_VERSION" "chromium-driver=$CHROMIUM_DEBIAN_VERSION") 2>/dev/null; then
        say "chromium $CHROMIUM_DEBIAN_VERSION is no longer in the archive; installing the archive's"
        apt_install chromium chromium chromium-driver
    fi
    say "browser: $("$CHROMEDRIVER" --version 2>/dev/null | cut -d' ' -f1-2)"
}

# Firefox ESR and geckodriver (which drives any recent Firefox).
install_firefox() {
    if [[ -x $FIREFOX ]]; then
        say "firefox-esr already installed: $("$FIREFOX" --version 2>/dev/null)"
    elif ! (apt_install firefox-esr "firefox-esr=$FIREFOX_DEBIAN_VERSION") 2>/dev/null; then
        say "firefox-esr $FIREFOX_DEBIAN_VERSION is no longer in the archive; installing the archive's"
        apt_install firefox-esr firefox-esr
    fi
    if [[ -x $GECKODRIVER ]]; then
        say "geckodriver $GECKODRIVER_VERSION already built"
        return
    fi
    local root=$CACHE/build/geckodriver-$GECKODRIVER_VERSION
    say "building geckodriver $GECKODRIVER_VERSION"
    CARGO_TARGET_DIR=$root/target cargo install --quiet --locked --version "$GECKODRIVER_VERSION" \
        --root "$root" geckodriver ||
        die "could not build geckodriver $GECKODRIVER_VERSION"
    cp "$root/bin/geckodriver" "$GECKODRIVER.tmp"
    mv "$GECKODRIVER.tmp" "$GECKODRIVER"
    rm -rf "$root"
}

cmd_install() {
    mkdir -p "$BIN"
    if wanted s3; then
        go_install versitygw "$VERSITYGW_MODULE" "$VERSITYGW_VERSION" "$VERSITYGW"
    fi
    if wanted toxiproxy; then
        go_install toxiproxy-server "$TOXIPROXY_MODULE/server" "$TOXIPROXY_VERSION" "$TOXIPROXY_SERVER"
        go_install toxiproxy-cli "$TOXIPROXY_MODULE/cli" "$TOXIPROXY_VERSION" "$TOXIPROXY_CLI"
    fi
    if wanted sftp; then
        install_sshd
    fi
    if wanted restic; then
        go_build_module restic "$RESTIC_MODULE" "$RESTIC_VERSION" ./cmd/restic "$RESTIC"
    fi
    if wanted kopia; then
        # kopia's main package is the module's root; without the -X settings it says it is
        # an "unofficial build" of version v0.
        go_build_module kopia "$KOPIA_MODULE" "$KOPIA_VERSION" . "$KOPIA" \
            "-X $KOPIA_MODULE/repo.BuildVersion=${KOPIA_VERSION#v} -X $KOPIA_MODULE/repo.BuildInfo=$KOPIA_VERSION"
    fi
    if wanted borg; then
        install_borg
    fi
    if wanted browser; then
        install_browser
    fi
    if wanted firefox; then
        install_firefox
    fi
    if wanted smtp; then
        # mailpit's main package is the module's root; the -X setting tells it its version.
        go_build_module mailpit "$MAILPIT_MODULE" "$MAILPIT_VERSION" . "$MAILPIT" \
            "-X $MAILPIT_MODULE/config.Version=$MAILPIT_VERSION"
    fi
}

# ---------------------------------------------------------------------------- helpers

# The run directory of start, selftest and stop.
run_dir() {
    if [[ -n ${COFFER_CI_RUN:-} ]]; then
        printf '%s\n' "$COFFER_CI_RUN"
    elif [[ -f $CACHE/last-run ]]; then
        cat "$CACHE/last-run"
    else
        return 1
    fi
}

# free_port VAR: sets VAR to a TCP port on 127.0.0.1 that nothing answers on, below the
# kernel's ephemeral range (so that outgoing connections do not take it meanwhile), and
# not one picked already.
PICKED=" "
free_port() {
    local port tries=0
    while ((tries++ < 200)); do
        port=$((20000 + RANDOM % 12000))
        [[ $PICKED == *" $port "* ]] && continue
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            PICKED+="$port "
            printf -v "$1" '%s' "$port"
            return
        fi
    done
    die "found no free TCP port on 127.0.0.1"
}

# wait_ready NAME PID LOG COMMAND...: waits until COMMAND succeeds, at most READY_TIMEOUT
# seconds, and fails with the server's log if it does not, or if the server exits.
wait_ready() {
    local name=$1 pid=$2 log=$3
    shift 3
    local deadline=$((SECONDS + READY_TIMEOUT))
    until "$@" >/dev/null 2>&1; do
        if ! alive "$pid"; then
            tail -n 20 "$log" >&2 || true
            die "$name exited during start; see its log $log"
        fi
        if ((SECONDS >= deadline)); then
            tail -n 20 "$log" >&2 || true
            die "$name did not answer within ${READY_TIMEOUT}s; see its log $log"
        fi
        sleep 0.1
    done
}

# http_answers URL: true once something answers HTTP there (any status).
http_answers() { curl -s -o /dev/null --max-time 2 "$1"; }

# ssh_banner PORT: true once an SSH server greets on 127.0.0.1:PORT.
ssh_banner() (
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    IFS= read -r -t 2 line <&3 || line=
    [[ $line == SSH-* ]]
)

# start_time PID: the process's start time (field 22 of /proc/PID/stat), which tells a
# process from a later one that got the same pid.
start_time() {
    local stat
    [[ $1 =~ ^[0-9]+$ ]] || return 1
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    # The command name (field 2) may hold spaces and parentheses: read after its last ')'.
    stat=${stat##*) }
    # shellcheck disable=SC2086
    set -- $stat
    printf '%s\n' "${20}"
}

# alive PID: true while PID runs (a zombie waiting for its parent to reap it counts as
# gone: started servers outlive the shell that started them, so init reaps them).
alive() {
    local stat
    [[ $1 =~ ^[0-9]+$ ]] || return 1
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

# children_of PID: the pids of PID's child processes (read from /proc: no ps needed).
children_of() {
    local parent=$1 f stat
    for f in /proc/[0-9]*/stat; do
        { read -r stat <"$f"; } 2>/dev/null || continue
        stat=${stat##*) }
        # shellcheck disable=SC2086
        set -- $stat
        if [[ $2 == "$parent" ]]; then
            f=${f#/proc/}
            printf '%s\n' "${f%/stat}"
        fi
    done
    return 0
}

# s3 OUT URL CURL-ARGS...: a SigV4-signed request to the test S3 server; prints the HTTP
# status (000 when nothing answered). The body is written to the file OUT ("-": dropped).
s3() {
    local out=$1 url=$2
    shift 2
    [[ $out == - ]] && out=/dev/null
    curl -s -o "$out" --max-time 20 -w '%{http_code}' \
        --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_ACCESS_KEY:$S3_SECRET_KEY" \
        "$@" "$url" 2>/dev/null || true
}

# ---------------------------------------------------------------------------- start

# spawn NAME LOG COMMAND...: starts COMMAND in the background, its pid in $RUN/NAME.pid.
spawn() {
    local name=$1 log=$2
    shift 2
    "$@" </dev/null >"$log" 2>&1 &
    local pid=$!
    echo "$pid $(start_time "$pid" || echo unknown)" >"$RUN/$name.pid"
}

# pid_of NAME: the pid of the server NAME started in $RUN, if that process still runs.
pid_of() {
    local pid started
    [[ -f $RUN/$1.pid ]] || return 1
    read -r pid started <"$RUN/$1.pid" || true
    [[ $pid =~ ^[0-9]+$ ]] && [[ $(start_time "$pid" 2>/dev/null) == "$started" ]] &&
        printf '%s\n' "$pid"
}

start_s3() {
    [[ -x $VERSITYGW ]] || die "versitygw $VERSITYGW_VERSION is not installed; run: $0 install"
    free_port S3_PORT
    mkdir -p "$RUN/s3-data"
    spawn versitygw "$RUN/versitygw.log" "$VERSITYGW" \
        --access "$S3_ACCESS_KEY" --secret "$S3_SECRET_KEY" --region "$S3_REGION" \
        --port "127.0.0.1:$S3_PORT" posix "$RUN/s3-data"
    # Any answer will do: an unsigned request gets 403.
    wait_ready versitygw "$(pid_of versitygw)" "$RUN/versitygw.log" \
        http_answers "http://127.0.0.1:$S3_PORT/"
    local status
    status=$(s3 - "http://127.0.0.1:$S3_PORT/$S3_BUCKET" -X PUT \
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD')
    [[ $status == 200 ]] ||
        die "versitygw: creating bucket $S3_BUCKET answered HTTP $status; see its log $RUN/versitygw.log"
}

start_toxiproxy() {
    [[ -x $TOXIPROXY_SERVER ]] ||
        die "toxiproxy $TOXIPROXY_VERSION is not installed; run: $0 install"
    free_port TOXIPROXY_PORT
    free_port PROXY_PORT
    spawn toxiproxy "$RUN/toxiproxy.log" "$TOXIPROXY_SERVER" \
        -host 127.0.0.1 -port "$TOXIPROXY_PORT"
    wait_ready toxiproxy "$(pid_of toxiproxy)" "$RUN/toxiproxy.log" \
        curl -sf --max-time 2 "http://127.0.0.1:$TOXIPROXY_PORT/version"
    local body
    body=$(printf '{"name":"%s","listen":"127.0.0.1:%s","upstream":"127.0.0.1:%s","enabled":true}' \
        "$PROXY_NAME" "$PROXY_PORT" "$S3_PORT")
    curl -sf --max-time 5 -o /dev/null -X POST -H 'Content-Type: application/json' \
        -d "$body" "http://127.0.0.1:$TOXIPROXY_PORT/proxies" ||
        die "toxiproxy: creating proxy $PROXY_NAME failed; see its log $RUN/toxiproxy.log"
    wait_ready "toxiproxy proxy $PROXY_NAME" "$(pid_of toxiproxy)" "$RUN/toxiproxy.log" \
        http_answers "http://127.0.0.1:$PROXY_PORT/"
}

start_sshd() {
    local sshd
    sshd=$(command -v sshd || echo /usr/sbin/sshd)
    [[ -x $sshd ]] || die "sshd is not installed; run: $0 install"
    free_port SFTP_PORT
    SFTP_USER=$(id -un)
    local d=$RUN/sshd
    mkdir -p "$d" "$RUN/sftp"
    chmod 700 "$d"
    ssh-keygen -q -t ed25519 -N '' -C coffer-ci-host -f "$d/host_ed25519"
    ssh-keygen -q -t ed25519 -N '' -C coffer-ci-client -f "$d/client_ed25519"
    cp "$d/client_ed25519.pub" "$d/authorized_keys"
    printf '[127.0.0.1]:%s %s\n' "$SFTP_PORT" "$(cut -d' ' -f1-2 "$d/host_ed25519.pub")" \
        >"$d/known_hosts"
    # As root, sshd needs its privilege separation directory (made at boot by the service).
    if [[ $(id -u) == 0 && ! -d /run/sshd ]]; then
        mkdir -p /run/sshd
        chmod 755 /run/sshd
    fi
    # Without PAM, sshd refuses accounts whose password is locked ("!" in /etc/shadow),
    # even for key login; root may read /etc/shadow and use the package's PAM setup.
    local use_pam=no
    if [[ $(id -u) == 0 && -f /etc/pam.d/sshd ]] &&
        [[ $(getent shadow "$SFTP_USER" | cut -d: -f2) == '!'* ]]; then
        use_pam=yes
    fi
    cat >"$d/sshd_config" <<EOF
# coffer CI: SFTP for the tests, loopback only, key login for $SFTP_USER alone.
ListenAddress 127.0.0.1:$SFTP_PORT
HostKey "$d/host_ed25519"
PidFile "$d/sshd.pid"
AuthorizedKeysFile "$d/authorized_keys"
AllowUsers $SFTP_USER
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM $use_pam
StrictModes no
X11Forwarding no
AllowTcpForwarding no
PrintMotd no
LogLevel VERBOSE
Subsystem sftp internal-sftp
EOF
    "$sshd" -t -f "$d/sshd_config" >"$RUN/sshd.log" 2>&1 ||
        die "sshd rejected its configuration $d/sshd_config; see its log $RUN/sshd.log"
    spawn sshd "$RUN/sshd.log" "$sshd" -D -e -f "$d/sshd_config"
    wait_ready sshd "$(pid_of sshd)" "$RUN/sshd.log" ssh_banner "$SFTP_PORT"
}

# mailpit: SMTP with STARTTLS required, under a certificate for 127.0.0.1 and localhost made
# here and signed by a CA made here too (COFFER_TEST_SMTP_CACERT, which the tests trust; a
# self-signed server certificate would be a CA used as an end entity, which rustls refuses);
# login required as SMTP_USER with SMTP_PASSWORD, and every message tagged with the user who
# sent it; its HTTP API (GET /api/v1/messages) shows what arrived, kept in memory only.
# ChromeDriver on a loopback port, accepting connections from loopback only; each test
# starts its own headless browser session through it.
start_chromedriver() {
    [[ -x $CHROMEDRIVER ]] || die "chromedriver is not installed; run: $0 install"
    free_port WEBDRIVER_PORT
    spawn chromedriver "$RUN/chromedriver.log" "$CHROMEDRIVER" --port="$WEBDRIVER_PORT" \
        --allowed-ips=127.0.0.1 --log-path="$RUN/chromedriver-verbose.log"
    wait_ready chromedriver "$(pid_of chromedriver)" "$RUN/chromedriver.log" \
        curl -sf --max-time 2 "http://127.0.0.1:$WEBDRIVER_PORT/status"
}

# geckodriver on a loopback port (it accepts requests naming that host only); it serves
# one Firefox session at a time, which the one Firefox test opens.
start_geckodriver() {
    [[ -x $GECKODRIVER ]] || die "geckodriver $GECKODRIVER_VERSION is not installed; run: $0 install"
    [[ -x $FIREFOX ]] || die "firefox-esr is not installed; run: $0 install"
    free_port GECKODRIVER_PORT
    spawn geckodriver "$RUN/geckodriver.log" "$GECKODRIVER" --host 127.0.0.1 --port "$GECKODRIVER_PORT" \
        --binary "$FIREFOX"
    wait_ready geckodriver "$(pid_of geckodriver)" "$RUN/geckodriver.log" \
        curl -sf --max-time 2 "http://127.0.0.1:$GECKODRIVER_PORT/status"
}

start_mailpit() {
    [[ -x $MAILPIT ]] || die "mailpit $MAILPIT_VERSION is not installed; run: $0 install"
    command -v openssl >/dev/null || die "openssl is needed to make mailpit's certificate (apt-get install openssl)"
    free_port SMTP_PORT
    free_port SMTP_API_PORT
    local d=$RUN/smtp
    mkdir -p "$d"
    chmod 700 "$d"
    {
        openssl req -x509 -newkey ed25519 -nodes -days 30 -subj "/CN=coffer test CA" \
            -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
            -keyout "$d/ca-key.pem" -out "$d/ca.pem" &&
            openssl req -new -newkey ed25519 -nodes -subj /CN=localhost \
                -keyout "$d/key.pem" -out "$d/cert.csr" &&
            printf '%s\n' basicConstraints=critical,CA:FALSE extendedKeyUsage=serverAuth \
                subjectAltName=IP:127.0.0.1,DNS:localhost >"$d/cert.ext" &&
            openssl x509 -req -in "$d/cert.csr" -CA "$d/ca.pem" -CAkey "$d/ca-key.pem" \
                -CAcreateserial -days 30 -extfile "$d/cert.ext" -out "$d/cert.pem"
        printf '%s:%s\n' "$SMTP_USER" "$(openssl passwd -6 "$SMTP_PASSWORD")" >"$d/passwords"
    } >"$RUN/mailpit.log" 2>&1 || die "openssl could not make mailpit's certificate; see $RUN/mailpit.log"
    spawn mailpit "$RUN/mailpit.log" "$MAILPIT" \
        --smtp "127.0.0.1:$SMTP_PORT" --listen "127.0.0.1:$SMTP_API_PORT" \
        --smtp-tls-cert "$d/cert.pem" --smtp-tls-key "$d/key.pem" --smtp-require-starttls \
        --smtp-auth-file "$d/passwords" --tags-username --disable-version-check
    wait_ready mailpit "$(pid_of mailpit)" "$RUN/mailpit.log" \
        curl -sf --max-time 2 "http://127.0.0.1:$SMTP_API_PORT/api/v1/info"
}

write_env() {
    local f=$RUN/env
    {
        echo "# coffer test services, written by .ci/services.sh start; load with: . $f"
        echo "export COFFER_CI_RUN=$(printf %q "$RUN")"
        [[ -n ${COFFER_TEST_SKIP:-} ]] && echo "export COFFER_TEST_SKIP=$(printf %q "$COFFER_TEST_SKIP")"
        if wanted s3; then
        echo "export COFFER_TEST_S3_ENDPOINT=http://127.0.0.1:$S3_PORT"
        echo "export COFFER_TEST_S3_BUCKET=$S3_BUCKET"
        echo "export COFFER_TEST_S3_ACCESS_KEY=$S3_ACCESS_KEY"
        echo "export COFFER_TEST_S3_SECRET_KEY=$S3_SECRET_KEY"
        echo "export COFFER_TEST_S3_REGION=$S3_REGION"
        echo "export COFFER_TEST_VERSITYGW=$(printf %q "$VERSITYGW")"
        fi
        if wanted toxiproxy; then
        echo "export COFFER_TEST_S3_PROXY_ENDPOINT=http://127.0.0.1:$PROXY_PORT"
        echo "export COFFER_TEST_TOXIPROXY=http://127.0.0.1:$TOXIPROXY_PORT"
        echo "export COFFER_TEST_TOXIPROXY_PROXY=$PROXY_NAME"
        fi
        if wanted sftp; then
        echo "export COFFER_TEST_SFTP_HOST=127.0.0.1"
        echo "export COFFER_TEST_SFTP_PORT=$SFTP_PORT"
        echo "export COFFER_TEST_SFTP_USER=$(printf %q "$SFTP_USER")"
        echo "export COFFER_TEST_SFTP_KEY=$(printf %q "$RUN/sshd/client_ed25519")"
        echo "export COFFER_TEST_SFTP_KNOWN_HOSTS=$(printf %q "$RUN/sshd/known_hosts")"
        echo "export COFFER_TEST_SFTP_ROOT=$(printf %q "$RUN/sftp")"
        fi
        if wanted restic; then
        echo "export COFFER_TEST_RESTIC=$(printf %q "$RESTIC")"
        fi
        if wanted borg; then
        echo "export COFFER_TEST_BORG=$(printf %q "$BORG")"
        fi
        if wanted kopia; then
        echo "export COFFER_TEST_KOPIA=$(printf %q "$KOPIA")"
        fi
        if wanted smtp; then
        echo "export COFFER_TEST_SMTP=127.0.0.1:$SMTP_PORT"
        echo "export COFFER_TEST_SMTP_API=http://127.0.0.1:$SMTP_API_PORT"
        echo "export COFFER_TEST_SMTP_CACERT=$(printf %q "$RUN/smtp/ca.pem")"
        echo "export COFFER_TEST_SMTP_USER=$SMTP_USER"
        echo "export COFFER_TEST_SMTP_PASSWORD=$SMTP_PASSWORD"
        fi
        if wanted browser; then
        echo "export COFFER_TEST_WEBDRIVER=http://127.0.0.1:$WEBDRIVER_PORT"
        echo "export COFFER_TEST_CHROMIUM=$(printf %q "$CHROMIUM")"
        fi
        if wanted firefox; then
        echo "export COFFER_TEST_GECKODRIVER=http://127.0.0.1:$GECKODRIVER_PORT"
        echo "export COFFER_TEST_FIREFOX=$(printf %q "$FIREFOX")"
        fi
    } >"$f.tmp"
    mv "$f.tmp" "$f"
}

cmd_start() {
    command -v curl >/dev/null || die "curl is needed (apt-get install curl)"
    if [[ -n ${COFFER_CI_RUN:-} ]]; then
        RUN=$COFFER_CI_RUN
        mkdir -p "$RUN"
    else
        RUN=$(mktemp -d "${TMPDIR:-/tmp}/coffer-ci.XXXXXX")
    fi
    RUN=$(cd "$RUN" && pwd)
    local name
    for name in versitygw toxiproxy sshd mailpit chromedriver geckodriver; do
        if pid_of "$name" >/dev/null; then
            die "$name is already running from $RUN; run: $0 stop"
        fi
    done
    rm -rf "$RUN/env" "$RUN/s3-data" "$RUN/sshd" "$RUN/sftp" "$RUN/smtp"
    if [[ -z ${COFFER_CI_RUN:-} ]]; then
        mkdir -p "$CACHE"
        printf '%s\n' "$RUN" >"$CACHE/last-run"
    fi
    # Whatever fails from here on, leave nothing running.
    trap 'say "start failed; stopping what was started"; COFFER_CI_RUN=$RUN cmd_stop' EXIT
    local started=()
    if wanted s3; then
        start_s3
        started+=("S3 127.0.0.1:$S3_PORT")
    fi
    if wanted toxiproxy; then
        start_toxiproxy
        started+=("proxy $PROXY_NAME 127.0.0.1:$PROXY_PORT, toxiproxy API 127.0.0.1:$TOXIPROXY_PORT")
    fi
    if wanted sftp; then
        start_sshd
        started+=("sshd 127.0.0.1:$SFTP_PORT")
    fi
    if wanted restic; then
        [[ -x $RESTIC ]] || die "restic $RESTIC_VERSION is not installed; run: $0 install"
        started+=("restic $RESTIC_VERSION (a binary, no server)")
    fi
    if wanted borg; then
        [[ -x $BORG ]] || die "borg $BORG_VERSION is not installed; run: $0 install"
        started+=("borg $BORG_VERSION (a binary, no server)")
    fi
    if wanted kopia; then
        [[ -x $KOPIA ]] || die "kopia $KOPIA_VERSION is not installed; run: $0 install"
        started+=("kopia $KOPIA_VERSION (a binary, no server)")
    fi
    if wanted smtp; then
        start_mailpit
        started+=("mailpit SMTP 127.0.0.1:$SMTP_PORT (STARTTLS), API 127.0.0.1:$SMTP_API_PORT")
    fi
    if wanted browser; then
        start_chromedriver
        started+=("chromedriver 127.0.0.1:$WEBDRIVER_PORT")
    fi
    if wanted firefox; then
        start_geckodriver
        started+=("geckodriver 127.0.0.1:$GECKODRIVER_PORT")
    fi
    write_env
    trap - EXIT
    local list=nothing part
    for part in "${started[@]}"; do
        [[ $list == nothing ]] && list=$part || list+="; $part"
    done
    say "started in $RUN: $list"
    say "load the test variables with: . $RUN/env"
}

# ---------------------------------------------------------------------------- stop

# stop_pid NAME: stops the server NAME started in $RUN, and its child processes (sshd
# serves each connection in one), if it still runs.
stop_pid() {
    local name=$1 pid kids i
    if pid=$(pid_of "$name"); then
        kids=$(children_of "$pid")
        # shellcheck disable=SC2086
        kill -TERM "$pid" $kids 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            alive "$pid" || break
            sleep 0.05
        done
        if alive "$pid"; then
            say "$name (pid $pid) did not stop on TERM; killing it"
            # shellcheck disable=SC2086
            kill -KILL "$pid" $kids 2>/dev/null || true
        fi
        say "stopped $name (pid $pid)"
    fi
    rm -f "$RUN/$name.pid"
}

cmd_stop() {
    RUN=$(run_dir) || { say "nothing to stop (no run directory)"; return 0; }
    [[ -d $RUN ]] || { say "nothing to stop ($RUN is gone)"; return 0; }
    stop_pid geckodriver || true
    stop_pid chromedriver || true
    stop_pid mailpit || true
    stop_pid sshd || true
    stop_pid toxiproxy || true
    stop_pid versitygw || true
}

# ---------------------------------------------------------------------------- selftest

FAILURES=0

# selftest_webdriver WHAT URL CAPABILITIES: a browser session opens through the WebDriver
# server at URL (and is closed again).
selftest_webdriver() {
    local what=$1 url=$2 caps=$3 session
    session=$(curl -s --max-time 60 -H 'Content-Type: application/json' \
        -d "{\"capabilities\":{\"alwaysMatch\":$caps}}" "$url/session" |
        grep -o '"sessionId":"[^"]*"' | cut -d'"' -f4 || true)
    check "$what through $url" "${session:+started}" started
    if [[ -n $session ]]; then
        curl -s --max-time 10 -X DELETE "$url/session/$session" >/dev/null || true
    fi
}

check() {
    local what=$1 got=$2 want=$3
    if [[ $got == "$want" ]]; then
        say "ok   $what"
    else
        [[ $got == 000 ]] && got="000 (no HTTP answer)"
        say "FAIL $what: got '$got', want '$want'"
        FAILURES=$((FAILURES + 1))
    fi
}

# selftest_s3 LABEL ENDPOINT: put, get, list, conditional put and delete one object.
selftest_s3() {
    local label=$1 ep=$2 key dir=$RUN/selftest sum status url
    key=selftest/$label-$$-$RANDOM.txt
    url=$ep/$S3_BUCKET/$key
    printf 'coffer selftest %s %s\n' "$label" "$(date +%s%N)" >"$dir/put"
    sum=$(sha256sum "$dir/put" | cut -d' ' -f1)
    status=$(s3 - "$url" -X PUT -H "x-amz-content-sha256: $sum" --data-binary "@$dir/put")
    check "$label: PUT $key" "$status" 200
    status=$(s3 "$dir/get" "$url" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD')
    check "$label: GET $key" "$status" 200
    check "$label: GET returns the bytes PUT" "$(cmp -s "$dir/put" "$dir/get" && echo same)" same
    # Query parameters sorted and encoded as SigV4 wants them: curl signs the URL as given.
    status=$(s3 "$dir/list" "$ep/$S3_BUCKET?list-type=2&prefix=selftest%2F" \
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD')
    check "$label: LIST" "$status" 200
    check "$label: LIST shows $key" "$(grep -c "<Key>$key</Key>" "$dir/list" 2>/dev/null || true)" 1
    status=$(s3 - "$url" -X PUT -H 'If-None-Match: *' -H "x-amz-content-sha256: $sum" \
        --data-binary "@$dir/put")
    check "$label: PUT If-None-Match: * on an existing object" "$status" 412
    status=$(s3 - "$url" -X DELETE -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD')
    check "$label: DELETE $key" "$status" 204
    status=$(s3 - "$url" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD')
    check "$label: GET after DELETE" "$status" 404
}

selftest_toxic() {
    local api=$COFFER_TEST_TOXIPROXY ep=$COFFER_TEST_S3_PROXY_ENDPOINT status start ms
    status=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X POST \
        -H 'Content-Type: application/json' \
        -d '{"name":"selftest-latency","type":"latency","stream":"downstream","attributes":{"latency":300}}' \
        "$api/proxies/$PROXY_NAME/toxics" || true)
    check "toxiproxy: add a 300 ms latency toxic" "$status" 200
    start=$(date +%s%N)
    status=$(s3 - "$ep/$S3_BUCKET?list-type=2" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD')
    ms=$((($(date +%s%N) - start) / 1000000))
    check "proxy: LIST with the toxic" "$status" 200
    check "proxy: the toxic delays the answer (${ms} ms)" "$((ms >= 300))" 1
    status=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X DELETE \
        "$api/proxies/$PROXY_NAME/toxics/selftest-latency" || true)
    check "toxiproxy: remove the toxic" "$status" 204
}

selftest_sftp() {
    local dir=$RUN/selftest name out
    name=selftest-$$-$RANDOM
    printf 'coffer sftp selftest %s\n' "$(date +%s%N)" >"$dir/sftp-put"
    cat >"$dir/sftp-batch" <<EOF
cd "$COFFER_TEST_SFTP_ROOT"
put "$dir/sftp-put" $name
get $name "$dir/sftp-get"
ls -l $name
rm $name
EOF
    if out=$(sftp -q -F /dev/null -b "$dir/sftp-batch" -P "$COFFER_TEST_SFTP_PORT" \
        -i "$COFFER_TEST_SFTP_KEY" -o IdentitiesOnly=yes -o BatchMode=yes \
        -o StrictHostKeyChecking=yes -o "UserKnownHostsFile=\"$COFFER_TEST_SFTP_KNOWN_HOSTS\"" \
        -o ConnectTimeout=10 "$COFFER_TEST_SFTP_USER@$COFFER_TEST_SFTP_HOST" 2>&1); then
        check "sftp: put, get, ls, rm as $COFFER_TEST_SFTP_USER" ok ok
    else
        printf '%s\n' "$out" >&2
        check "sftp: put, get, ls, rm as $COFFER_TEST_SFTP_USER (see $RUN/sshd.log)" failed ok
    fi
    check "sftp: get returns the bytes put" \
        "$(cmp -s "$dir/sftp-put" "$dir/sftp-get" && echo same)" same
    check "sftp: rm removed the file" "$([[ -e $COFFER_TEST_SFTP_ROOT/$name ]] && echo present)" ""
}

# selftest_smtp: one message sent over STARTTLS (the certificate verified against the one made
# at start), then found through mailpit's API; a plain-text attempt is refused.
selftest_smtp() {
    local dir=$RUN/selftest subject status
    subject="coffer selftest $$-$RANDOM"
    printf 'From: ci@coffer.test\r\nTo: admin@coffer.test\r\nSubject: %s\r\n\r\nselftest\r\n' \
        "$subject" >"$dir/mail"
    if curl -s --max-time 10 --ssl-reqd --cacert "$COFFER_TEST_SMTP_CACERT" \
        --user "$COFFER_TEST_SMTP_USER:$COFFER_TEST_SMTP_PASSWORD" --mail-from ci@coffer.test --mail-rcpt admin@coffer.test -T "$dir/mail" \
        "smtp://$COFFER_TEST_SMTP" >/dev/null 2>"$dir/smtp-err"; then
        check "smtp: a message sent with STARTTLS and a login" ok ok
    else
        cat "$dir/smtp-err" >&2
        check "smtp: a message sent with STARTTLS and a login (see $RUN/mailpit.log)" failed ok
    fi
    status=$(curl -s --max-time 5 -o "$dir/messages" -w '%{http_code}' \
        "$COFFER_TEST_SMTP_API/api/v1/messages" || true)
    check "smtp: GET /api/v1/messages" "$status" 200
    check "smtp: the API lists the message" "$(grep -c "$subject" "$dir/messages" 2>/dev/null || true)" 1
    if curl -s --max-time 10 --mail-from ci@coffer.test --mail-rcpt admin@coffer.test \
        -T "$dir/mail" "smtp://$COFFER_TEST_SMTP" >/dev/null 2>&1; then
        check "smtp: plain text without STARTTLS is refused" accepted refused
    else
        check "smtp: plain text without STARTTLS is refused" refused refused
    fi
}

cmd_selftest() {
    RUN=$(run_dir) || die "no run directory; run: $0 start"
    [[ -f $RUN/env ]] || die "no $RUN/env; run: $0 start"
    # shellcheck source=/dev/null
    . "$RUN/env"
    rm -rf "$RUN/selftest"
    mkdir -p "$RUN/selftest"
    if wanted s3; then
        selftest_s3 gateway "$COFFER_TEST_S3_ENDPOINT"
    fi
    if wanted toxiproxy; then
        selftest_s3 proxy "$COFFER_TEST_S3_PROXY_ENDPOINT"
        selftest_toxic
    fi
    if wanted sftp; then
        selftest_sftp
    fi
    if wanted restic; then
        check "restic: $COFFER_TEST_RESTIC version" \
            "$("$COFFER_TEST_RESTIC" version 2>&1 | cut -d' ' -f1-2)" "restic ${RESTIC_VERSION#v}"
    fi
    if wanted borg; then
        check "borg: $COFFER_TEST_BORG --version" "$("$COFFER_TEST_BORG" --version 2>&1)" "borg $BORG_VERSION"
    fi
    if wanted smtp; then
        selftest_smtp
    fi
    if wanted browser; then
        selftest_webdriver "browser: a headless Chromium session" "$COFFER_TEST_WEBDRIVER" \
            '{"goog:chromeOptions":{"args":["--headless=new","--no-sandbox","--disable-gpu","--disable-dev-shm-usage"]}}'
    fi
    if wanted firefox; then
        selftest_webdriver "firefox: a headless Firefox session" "$COFFER_TEST_GECKODRIVER" \
            '{"moz:firefoxOptions":{"args":["-headless"]}}'
    fi
    if wanted kopia; then
        check "kopia: $COFFER_TEST_KOPIA --version" \
            "$("$COFFER_TEST_KOPIA" --version 2>&1 | cut -d' ' -f1)" "${KOPIA_VERSION#v}"
    fi
    rm -rf "$RUN/selftest"
    ((FAILURES == 0)) || die "selftest: $FAILURES check(s) failed; logs are in $RUN"
    say "selftest passed"
}

# ---------------------------------------------------------------------------- main

case ${1:-} in
install) cmd_install ;;
start) cmd_start ;;
selftest) cmd_selftest ;;
stop) cmd_stop ;;
*)
    echo "usage: $0 install | start | selftest | stop" >&2
    exit 2
    ;;
esac
