#!/usr/bin/env bash
# bench/run.sh: side-by-side benchmark of coffer against restic, rustic, borg and kopia.
# See bench/README.md.  Usage:
#   bash bench/run.sh [--size MB] [--random-mb MB] [--repeat N] [--tools coffer,restic,...]
#                     [--skip-rustic] [--no-install] [--install-only] [--data-only] [--build-coffer]
#                     [--coffer PATH] [--work DIR] [--cache DIR] [--step-timeout SECONDS]
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$BENCH_DIR/.." && pwd)"
CMDLINE="bash bench/run.sh"
for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./,=:+-]+$ ]]; then CMDLINE+=" $a"; else CMDLINE+=" $(printf '%q' "$a")"; fi
done

# ---- pinned peer versions -------------------------------------------------------------
RESTIC_VERSION=${RESTIC_VERSION:-0.19.1}
KOPIA_VERSION=${KOPIA_VERSION:-0.22.3}
RUSTIC_VERSION=${RUSTIC_VERSION:-0.11.4}

# ---- defaults and options -------------------------------------------------------------
CACHE=${COFFER_BENCH_CACHE:-$HOME/.cache/coffer-bench}
WORK=${COFFER_BENCH_WORK:-$BENCH_DIR/work}
SIZE_MB=1024
RANDOM_MB=1024
REPEAT=3
TOOLS=coffer,restic,rustic,borg,kopia
SKIP_RUSTIC=${COFFER_BENCH_SKIP_RUSTIC:-0}
INSTALL=1
INSTALL_ONLY=0
DATA_ONLY=0
BUILD_COFFER=0
COFFER_BIN=${COFFER_BIN:-$ROOT/target/release/coffer}
STEP_TIMEOUT=${COFFER_BENCH_STEP_TIMEOUT:-7200}
SOURCE_ROOTS=(/usr/share /usr/lib)

usage() { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --size) SIZE_MB=$2; shift 2 ;;
        --random-mb) RANDOM_MB=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --tools) TOOLS=$2; shift 2 ;;
        --skip-rustic) SKIP_RUSTIC=1; shift ;;
        --no-install) INSTALL=0; shift ;;
        --install-only) INSTALL_ONLY=1; shift ;;
        --data-only) DATA_ONLY=1; shift ;;
        --build-coffer) BUILD_COFFER=1; shift ;;
        --coffer) COFFER_BIN=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --cache) CACHE=$2; shift 2 ;;
        --step-timeout) STEP_TIMEOUT=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "run.sh: unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
for v in SIZE_MB RANDOM_MB REPEAT STEP_TIMEOUT; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || { echo "run.sh: $v must be a positive integer" >&2; exit 2; }
done

IFS=, read -r -a TOOL_LIST <<<"$TOOLS"
for t in "${TOOL_LIST[@]}"; do
    case "$t" in coffer|restic|rustic|borg|kopia) ;; *) echo "run.sh: unknown tool: $t" >&2; exit 2 ;; esac
done
if [[ $SKIP_RUSTIC == 1 ]]; then
    tl=(); for t in "${TOOL_LIST[@]}"; do [[ $t == rustic ]] || tl+=("$t"); done; TOOL_LIST=("${tl[@]}")
fi

mkdir -p "$CACHE" "$CACHE/logs" "$WORK"
CACHE=$(cd "$CACHE" && pwd)
WORK=$(cd "$WORK" && pwd)

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

SUDO=""
if [[ $(id -u) != 0 ]] && command -v sudo >/dev/null; then SUDO="sudo -n"; fi
export DEBIAN_FRONTEND=noninteractive
APT_UPDATED=0
apt_install() { # apt_install PKG...: apt-get install, running apt-get update first when needed
    local p need=0
    for p in "$@"; do
        if ! apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [0-9]'; then need=1; fi
    done
    if [[ $need == 1 && $APT_UPDATED == 0 ]]; then
        log "apt-get update"
        $SUDO apt-get update -qq >&2 || return 1
        APT_UPDATED=1
    fi
    log "apt-get install -y $*"
    $SUDO apt-get install -y -qq "$@" >&2
}

# ---- tool availability ------------------------------------------------------------------
declare -A BIN=() NOTE=() VERSION=()

prepare_time() {
    if [[ ! -x /usr/bin/time ]]; then
        apt_install time || { log "FATAL: /usr/bin/time is missing and could not be installed"; exit 1; }
    fi
}

prepare_coffer() {
    if [[ $BUILD_COFFER == 1 || ! -x $COFFER_BIN ]]; then
        log "coffer: cargo build --release -p coffer (in $ROOT)"
        if ! (cd "$ROOT" && cargo build --release -p coffer) >&2; then
            NOTE[coffer]="not available: cargo build --release -p coffer failed"; return 1
        fi
        COFFER_BIN=$ROOT/target/release/coffer
    fi
    # Snapshot the binary: other people may rebuild target/release while we measure.
    mkdir -p "$WORK/bin"
    cp "$COFFER_BIN" "$WORK/bin/coffer.new" && mv "$WORK/bin/coffer.new" "$WORK/bin/coffer"
    BIN[coffer]=$WORK/bin/coffer
    COFFER_MTIME=$(date -r "$COFFER_BIN" '+%Y-%m-%d %H:%M' 2>/dev/null || echo '?')
    log "coffer: using a copy of $COFFER_BIN (sha256 $(sha256sum "$COFFER_BIN" | cut -c1-16)...)"
}

install_go_peer() { # NAME MODULE VERSION PACKAGE [LDFLAGS]
    local name=$1 module=$2 version=$3 pkg=$4 ldflags=${5:-}
    local bin=$CACHE/$name stamp=$CACHE/$name.version tmp dir
    if [[ -x $bin && "$(cat "$stamp" 2>/dev/null)" == "$version" ]]; then
        log "$name $version: cached at $bin"; return 0
    fi
    [[ $INSTALL == 1 ]] || { log "$name: not cached and --no-install given"; return 1; }
    command -v go >/dev/null || { log "$name: go is not installed"; return 1; }
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/coffer-bench-$name.XXXXXX") || return 1
    log "$name $version: go mod download -json $module@v$version"
    dir=$(cd "$tmp" && go mod download -json "$module@v$version" |
          python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') || { rm -rf "$tmp"; return 1; }
    log "$name $version: copying $dir to $tmp/src (the module cache is read-only)"
    cp -r "$dir" "$tmp/src" && chmod -R u+w "$tmp/src" || { rm -rf "$tmp"; return 1; }
    log "$name $version: go build -o $bin $pkg (log: $CACHE/logs/$name-build.log)"
    if ! (cd "$tmp/src" && go build -buildvcs=false -trimpath -ldflags "$ldflags" -o "$bin.new" "$pkg") \
            >"$CACHE/logs/$name-build.log" 2>&1; then
        tail -n 20 "$CACHE/logs/$name-build.log" >&2; rm -rf "$tmp"; return 1
    fi
    mv "$bin.new" "$bin" && echo "$version" >"$stamp"
    rm -rf "$tmp"
}

install_rustic() {
    local bin=$CACHE/rustic/bin/rustic
    if [[ -x $bin ]] && "$bin" --version 2>/dev/null | grep -qF "$RUSTIC_VERSION"; then
        log "rustic $RUSTIC_VERSION: cached at $bin"; return 0
    fi
    [[ $INSTALL == 1 ]] || { log "rustic: not cached and --no-install given"; return 1; }
    command -v cargo >/dev/null || { log "rustic: cargo is not installed"; return 1; }
    log "rustic $RUSTIC_VERSION: cargo install rustic-rs --version $RUSTIC_VERSION --locked --root $CACHE/rustic"
    log "  (long build, 20+ minutes on 2 cores; log: $CACHE/logs/rustic-install.log; skip with --skip-rustic)"
    if ! cargo install rustic-rs --version "$RUSTIC_VERSION" --locked --root "$CACHE/rustic" \
            >"$CACHE/logs/rustic-install.log" 2>&1; then
        tail -n 20 "$CACHE/logs/rustic-install.log" >&2; return 1
    fi
}

install_borg() {
    if command -v borg >/dev/null; then log "borg: found $(command -v borg)"; return 0; fi
    [[ $INSTALL == 1 ]] || { log "borg: not installed and --no-install given"; return 1; }
    if apt_install borgbackup && command -v borg >/dev/null; then return 0; fi
    log "borg: apt failed; trying python3 -m pip install borgbackup"
    python3 -m pip install -q borgbackup >&2 || return 1
    hash -r; command -v borg >/dev/null
}

prepare_tools() {
    local t
    for t in "${TOOL_LIST[@]}"; do
        case "$t" in
            coffer) prepare_coffer || true ;;
            restic)
                if install_go_peer restic github.com/restic/restic "$RESTIC_VERSION" ./cmd/restic; then
                    BIN[restic]=$CACHE/restic
                else NOTE[restic]="not available: install of restic $RESTIC_VERSION failed (see log above)"; fi ;;
            kopia)
                if install_go_peer kopia github.com/kopia/kopia "$KOPIA_VERSION" . \
                        "-X github.com/kopia/kopia/repo.BuildVersion=v$KOPIA_VERSION -X github.com/kopia/kopia/repo.BuildInfo=go-module"; then
                    BIN[kopia]=$CACHE/kopia
                else NOTE[kopia]="not available: install of kopia $KOPIA_VERSION failed (see log above)"; fi ;;
            rustic)
                if install_rustic; then BIN[rustic]=$CACHE/rustic/bin/rustic
                else NOTE[rustic]="not available: cargo install rustic-rs $RUSTIC_VERSION failed (see $CACHE/logs/rustic-install.log)"; fi ;;
            borg)
                if install_borg; then BIN[borg]=$(command -v borg)
                else NOTE[borg]="not available: neither apt-get nor pip could install borgbackup"; fi ;;
        esac
    done
    if [[ $SKIP_RUSTIC == 1 ]]; then NOTE[rustic]="skipped (--skip-rustic / COFFER_BENCH_SKIP_RUSTIC=1)"; fi
}

tool_version() {
    local b=${BIN[$1]:-}
    [[ -n $b ]] || { echo "-"; return; }
    case "$1" in
        coffer) "$b" --version ;;
        restic) "$b" version ;;
        rustic) "$b" --version ;;
        borg) "$b" --version ;;
        kopia) "$b" --version ;;
    esac 2>/dev/null | head -n1 || echo "?"
}

# ---- data sets --------------------------------------------------------------------------
DATA=$WORK/data
V1=$DATA/v1 V2=$DATA/v2 RND=$DATA/random
V2_MANIFEST=$DATA/v2.manifest
SRC=$WORK/src                       # fixed source path that every tool backs up
RANDOM_KEY=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f

make_datasets() {
    local stamp="size=$SIZE_MB roots=${SOURCE_ROOTS[*]} seed=42 v=2"
    mkdir -p "$DATA"
    if [[ "$(cat "$DATA/tree.stamp" 2>/dev/null)" != "$stamp" || ! -f $V2_MANIFEST || ! -d $V2 ]]; then
        log "data: selecting ~$SIZE_MB MiB of files from ${SOURCE_ROOTS[*]} (ordered by sha1 of path)"
        rm -rf "$V1" "$V2" "$V2_MANIFEST" "$DATA/tree.stamp"
        mkdir -p "$V1"
        python3 "$BENCH_DIR/dataset.py" select "$SIZE_MB" "${SOURCE_ROOTS[@]}" >"$DATA/v1.list"
        log "data: cp -a --parents into $V1"
        (cd / && xargs -0 -r cp -a --parents -t "$V1" <"$DATA/v1.list") ||
            log "data: warning: some files could not be copied"
        echo "coffer-bench data set root" >"$V1/.bench-root"
        log "data: v2 = copy of v1 with ~1% of files changed (random.Random(42))"
        cp -a "$V1" "$V2"
        python3 "$BENCH_DIR/dataset.py" mutate "$V2" 42
        python3 "$BENCH_DIR/dataset.py" manifest "$V2" >"$V2_MANIFEST"
        echo "$stamp" >"$DATA/tree.stamp"
    else
        log "data: reusing $V1 and $V2 ($stamp)"
    fi
    # v=2: each part's counter starts 2^64 blocks from the previous part's. With v=1's
    # consecutive IVs each part was the one before shifted by 16 bytes, which a
    # content-defined chunker deduplicates: the "incompressible" set was mostly one part.
    stamp="random=$RANDOM_MB key=$RANDOM_KEY v=2"
    if [[ "$(cat "$DATA/random.stamp" 2>/dev/null)" != "$stamp" ]]; then
        log "data: $RANDOM_MB MiB of incompressible data (openssl aes-256-ctr of /dev/zero, fixed key)"
        rm -rf "$RND" "$DATA/random.stamp"
        mkdir -p "$RND"
        local left=$RANDOM_MB i=0 part
        while [[ $left -gt 0 ]]; do
            part=$(( left > 256 ? 256 : left ))
            { openssl enc -aes-256-ctr -nosalt -K "$RANDOM_KEY" -iv "$(printf '%016x%016x' "$i" 0)" -in /dev/zero 2>/dev/null || true; } |
                head -c $(( part * 1024 * 1024 )) >"$RND/part-$(printf '%03d' "$i").bin"
            left=$(( left - part )); i=$(( i + 1 ))
        done
        echo "$stamp" >"$DATA/random.stamp"
    else
        log "data: reusing $RND ($stamp)"
    fi
    V1_FILES=$(find "$V1" -type f | wc -l); V1_BYTES=$(du -sb "$V1" | cut -f1)
    V2_FILES=$(find "$V2" -type f | wc -l); V2_BYTES=$(du -sb "$V2" | cut -f1)
    RND_BYTES=$(du -sb "$RND" | cut -f1)
}

# ---- measurement --------------------------------------------------------------------------
RUN_ID=$(date +%Y-%m-%dT%H%M)-$(hostname -s 2>/dev/null || hostname)
RUN_DIR=$WORK/runs/$RUN_ID
LOGS=$RUN_DIR/logs
CSV=$RUN_DIR/raw.csv
STEP_CWD=""

csv_row() { # rep tool step status rc wall user sys rss_kb repo_bytes note
    local note=${11//,/;}
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9" "${10}" "${note//$'\n'/ }" >>"$CSV"
}

# run_step REP TOOL STEP REPO_DIR_OR_- CMD...: time one command; sets STEP_STATUS
run_step() {
    local rep=$1 tool=$2 step=$3 repo=$4; shift 4
    local logf=$LOGS/$rep-$tool-$step.log tf=$RUN_DIR/time.out rc wall=NA user=NA sys=NA rss=NA size=NA
    sync
    {
        printf '# cwd: %s\n# cmd:' "${STEP_CWD:-$PWD}"; printf ' %q' "$@"; printf '\n'
    } >"$logf"
    rm -f "$tf"
    set +e
    ( [[ -z $STEP_CWD ]] || cd "$STEP_CWD"
      exec /usr/bin/time -f '%e %U %S %M' -o "$tf" timeout --kill-after=30 "$STEP_TIMEOUT" "$@" ) >>"$logf" 2>&1 </dev/null
    rc=$?
    set -e
    if [[ -s $tf ]]; then read -r wall user sys rss < <(tail -n1 "$tf"); fi
    if [[ $repo != - && -d $repo ]]; then size=$(du -sb "$repo" | cut -f1); fi
    STEP_STATUS=ok
    if [[ $rc == 124 || $rc == 137 ]]; then STEP_STATUS=timeout
    elif [[ $rc != 0 ]]; then STEP_STATUS=fail; fi
    STEP_RC=$rc STEP_WALL=$wall STEP_USER=$user STEP_SYS=$sys STEP_RSS=$rss STEP_SIZE=$size STEP_LOG=$logf
    log "  $tool $step: $STEP_STATUS (exit $rc) wall ${wall}s cpu ${user}+${sys}s rss ${rss}KiB repo ${size}B"
    if [[ $STEP_STATUS != ok ]]; then tail -n 5 "$logf" | sed 's/^/    | /' >&2; fi
}

record() { # REP TOOL STEP [NOTE]: append the last run_step result to the CSV
    csv_row "$1" "$2" "$3" "$STEP_STATUS" "$STEP_RC" "$STEP_WALL" "$STEP_USER" "$STEP_SYS" "$STEP_RSS" "$STEP_SIZE" "${4:-}"
}

# Tool adapters: tool_cmd TOOL ACTION ARG... prints nothing; sets array CMD (and STEP_CWD)
tool_cmd() {
    local tool=$1 action=$2 repo=$3 arg=${4:-} b=${BIN[$1]}
    local st=$STATE/$tool
    STEP_CWD=""
    case "$tool:$action" in
        coffer:init)    CMD=("$b" --repo "$repo" --quiet init) ;;
        coffer:backup)  CMD=("$b" --repo "$repo" --quiet backup "$arg") ;;
        coffer:restore) CMD=("$b" --repo "$repo" --quiet restore latest --target "$arg") ;;
        coffer:check)   CMD=("$b" --repo "$repo" --quiet check --read-data) ;;

        restic:init)    CMD=("$b" -r "$repo" --cache-dir "$st/cache" -q init) ;;
        restic:backup)  CMD=("$b" -r "$repo" --cache-dir "$st/cache" -q backup "$arg") ;;
        restic:restore) CMD=("$b" -r "$repo" --cache-dir "$st/cache" -q restore latest --target "$arg") ;;
        restic:check)   CMD=("$b" -r "$repo" --cache-dir "$st/cache" -q check --read-data) ;;

        rustic:init)    CMD=("$b" -r "$repo" --cache-dir "$st/cache" --no-progress init) ;;
        rustic:backup)  CMD=("$b" -r "$repo" --cache-dir "$st/cache" --no-progress backup "$arg") ;;
        rustic:restore) CMD=("$b" -r "$repo" --cache-dir "$st/cache" --no-progress restore latest "$arg") ;;
        rustic:check)   CMD=("$b" -r "$repo" --cache-dir "$st/cache" --no-progress check --read-data) ;;

        # borg 1.x needs an explicit mode; borg's docs recommend repokey (HMAC-SHA256) on CPUs
        # with SHA extensions and repokey-blake2 otherwise.  Default compression (lz4) kept.
        borg:init)      CMD=("$b" init --encryption="$BORG_MODE" "$repo") ;;
        borg:backup)    CMD=("$b" create "$repo::$5" "$arg") ;;
        borg:restore)   CMD=("$b" extract "$repo::$5"); STEP_CWD=$arg ;;
        borg:check)     CMD=("$b" check --verify-data "$repo") ;;

        # kopia: filesystem repository, private config file and cache; default policy
        # (kopia compresses nothing by default).
        kopia:init)     CMD=("$b" --config-file "$st/repository.config" --log-dir "$st/logs" repository create filesystem
                             --path "$repo" --cache-directory "$st/cache" --no-persist-credentials) ;;
        kopia:backup)   CMD=("$b" --config-file "$st/repository.config" --log-dir "$st/logs" snapshot create --no-progress "$arg") ;;
        kopia:restore)  CMD=("$b" --config-file "$st/repository.config" --log-dir "$st/logs" snapshot restore --no-progress "$5" "$arg") ;;
        kopia:check)    CMD=("$b" --config-file "$st/repository.config" --log-dir "$st/logs" snapshot verify --verify-files-percent=100) ;;
    esac
}

kopia_latest_root() { # prints the root object of the newest snapshot of $SRC
    "${BIN[kopia]}" --config-file "$STATE/kopia/repository.config" --log-dir "$STATE/kopia/logs" \
        snapshot list --json "$SRC" 2>>"$LOGS/kopia-list.log" |
        python3 -c 'import json,sys; s=json.load(sys.stdin); print(s[-1]["rootEntry"]["obj"])'
}

verify_restore() { # TARGET: compare the restored tree with the v2 manifest; sets VERIFY_NOTE
    local target=$1 marker out=$RUN_DIR/restored.manifest
    marker=$(find "$target" -name .bench-root -type f -print -quit 2>/dev/null)
    if [[ -z $marker ]]; then VERIFY_NOTE="restore check: no .bench-root found under target"; return 1; fi
    python3 "$BENCH_DIR/dataset.py" manifest "$(dirname "$marker")" >"$out"
    if cmp -s "$V2_MANIFEST" "$out"; then VERIFY_NOTE="restore verified ($(wc -l <"$out") files identical)"; return 0; fi
    local nd; nd=$(diff "$V2_MANIFEST" "$out" | grep -c '^[<>]' || true)
    diff "$V2_MANIFEST" "$out" | head -n 20 >"$RUN_DIR/restore-diff-$2.txt" || true
    VERIFY_NOTE="restore differs from source: $nd manifest lines differ (first: $(diff "$V2_MANIFEST" "$out" | grep -m1 '^[<>]' | cut -c1-160))"
    return 1
}

run_tool() { # REP TOOL
    local rep=$1 tool=$2
    local repo=$RUN_DIR/repo-$tool target=$RUN_DIR/restore-$tool
    STATE=$RUN_DIR/state
    rm -rf "$repo" "$target" "$STATE/$tool" "$SRC"
    mkdir -p "$STATE/$tool" "$target"
    export BORG_BASE_DIR=$STATE/borg
    log "[$rep/$REPEAT] $tool: fresh copy of v1 at $SRC"
    cp -a "$V1" "$SRC"

    tool_cmd "$tool" init "$repo"; run_step "$rep" "$tool" init "$repo" "${CMD[@]}"; record "$rep" "$tool" init
    if [[ $STEP_STATUS != ok ]]; then
        for s in backup-v1 backup-v1-unchanged backup-v2 restore check-read-data; do
            csv_row "$rep" "$tool" "$s" skipped NA NA NA NA NA NA "init failed"
        done
    else
        tool_cmd "$tool" backup "$repo" "$SRC" v1
        run_step "$rep" "$tool" backup-v1 "$repo" "${CMD[@]}"; record "$rep" "$tool" backup-v1
        tool_cmd "$tool" backup "$repo" "$SRC" v1-unchanged
        run_step "$rep" "$tool" backup-v1-unchanged "$repo" "${CMD[@]}"; record "$rep" "$tool" backup-v1-unchanged
        python3 "$BENCH_DIR/dataset.py" mutate "$SRC" 42 2>>"$LOGS/$rep-$tool-mutate.log"
        tool_cmd "$tool" backup "$repo" "$SRC" v2
        run_step "$rep" "$tool" backup-v2 "$repo" "${CMD[@]}"; record "$rep" "$tool" backup-v2

        local snap=v2
        if [[ $tool == kopia ]]; then snap=$(kopia_latest_root || echo unknown-snapshot); fi
        tool_cmd "$tool" restore "$repo" "$target" "$snap"
        run_step "$rep" "$tool" restore - "${CMD[@]}"
        if [[ $STEP_STATUS == ok ]]; then
            if verify_restore "$target" "$tool"; then record "$rep" "$tool" restore "$VERIFY_NOTE"
            else STEP_STATUS=bad-restore; log "  $tool restore: $VERIFY_NOTE"; record "$rep" "$tool" restore "$VERIFY_NOTE"; fi
        else record "$rep" "$tool" restore; fi
        rm -rf "$target"

        tool_cmd "$tool" check "$repo"
        run_step "$rep" "$tool" check-read-data - "${CMD[@]}"; record "$rep" "$tool" check-read-data
    fi
    rm -rf "$repo" "$STATE/$tool" "$SRC"

    # incompressible set, fresh repository
    mkdir -p "$STATE/$tool"
    tool_cmd "$tool" init "$repo"; run_step "$rep" "$tool" init-random "$repo" "${CMD[@]}"
    if [[ $STEP_STATUS == ok ]]; then
        tool_cmd "$tool" backup "$repo" "$RND" random
        run_step "$rep" "$tool" backup-random "$repo" "${CMD[@]}"; record "$rep" "$tool" backup-random
    else
        record "$rep" "$tool" backup-random "init of the repository failed"
    fi
    rm -rf "$repo" "$STATE/$tool" "$STATE/borg"
}

machine_facts() {
    local f=$1 t
    {
        echo "- host: $(hostname)"
        echo "- nproc: $(nproc)"
        echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
        echo "- CPU flags of note: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'aes|avx2|avx512f|sha_ni|pclmulqdq' | tr '\n' ' ')"
        echo "- memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
        echo "- kernel: $(uname -srm)"
        echo "- OS: $( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null || echo unknown)"
        echo "- file system of work dir: $(df -T "$WORK" | awk 'NR==2 {print $2 " on " $1}')"
        echo "- coffer source: $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$ROOT" && [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]] && echo ' (work tree has uncommitted changes)')"
        echo "- coffer binary: $COFFER_BIN as of ${COFFER_MTIME:-?}, measured from a copy (sha256 $(sha256sum "${BIN[coffer]:-$COFFER_BIN}" 2>/dev/null | cut -c1-16))"
        echo "- load average (1/5/15 min) at start of measurements: $LOAD_START; at end: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo
        echo "| tool | version | binary / status |"
        echo "| --- | --- | --- |"
        for t in coffer restic rustic borg kopia; do
            if [[ -n ${BIN[$t]:-} ]]; then
                echo "| $t | $(tool_version "$t") | \`${BIN[$t]}\` |"
            else
                echo "| $t | - | ${NOTE[$t]:-not requested (--tools)} |"
            fi
        done
    } >"$f"
}

# ---- main -----------------------------------------------------------------------------------
log "coffer benchmark: $CMDLINE"
if [[ $DATA_ONLY == 1 ]]; then make_datasets; log "data sets ready in $DATA"; exit 0; fi
log "cache: $CACHE   work: $WORK   tools: ${TOOL_LIST[*]}"
prepare_time
prepare_tools
if [[ $INSTALL_ONLY == 1 ]]; then
    for t in "${TOOL_LIST[@]}"; do log "$t: ${BIN[$t]:-${NOTE[$t]:-?}}"; done
    exit 0
fi
if grep -qw sha_ni /proc/cpuinfo; then BORG_MODE=${BORG_ENCRYPTION:-repokey}; else BORG_MODE=${BORG_ENCRYPTION:-repokey-blake2}; fi

make_datasets

mkdir -p "$LOGS" "$BENCH_DIR/results"
echo "rep,tool,step,status,exit_code,wall_s,user_s,sys_s,max_rss_kb,repo_bytes,note" >"$CSV"

export COFFER_PASSWORD=coffer-bench-password
export RESTIC_PASSWORD=$COFFER_PASSWORD RUSTIC_PASSWORD=$COFFER_PASSWORD
export BORG_PASSPHRASE=$COFFER_PASSWORD KOPIA_PASSWORD=$COFFER_PASSWORD
export KOPIA_CHECK_FOR_UPDATES=false BORG_RELOCATED_REPO_ACCESS_IS_OK=yes
export XDG_CONFIG_HOME=$RUN_DIR/xdg-config XDG_CACHE_HOME=$RUN_DIR/xdg-cache XDG_DATA_HOME=$RUN_DIR/xdg-data
unset COFFER_REPOSITORY RESTIC_REPOSITORY RUSTIC_REPOSITORY BORG_REPO KOPIA_CONFIG_PATH 2>/dev/null || true

RUN_TOOLS=()
for t in "${TOOL_LIST[@]}"; do
    if [[ -n ${BIN[$t]:-} ]]; then RUN_TOOLS+=("$t"); else log "$t: ${NOTE[$t]:-not available}"; fi
done
log "measuring: ${RUN_TOOLS[*]:-nothing}, $REPEAT repetition(s), warm cache, same tool order every repetition"
START=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for ((rep = 1; rep <= REPEAT; rep++)); do
    for t in "${RUN_TOOLS[@]}"; do run_tool "$rep" "$t"; done
done
ELAPSED=$(( $(date +%s) - START ))

STEM=$BENCH_DIR/results/$RUN_ID
machine_facts "$RUN_DIR/facts.md"
{
    for t in "${TOOL_LIST[@]}"; do
        if [[ -n ${BIN[$t]:-} ]]; then printf '%s\tok\n' "$t"; else printf '%s\t%s\n' "$t" "${NOTE[$t]:-not available}"; fi
    done
} >"$RUN_DIR/tools.tsv"
cp "$CSV" "$STEM.csv"
python3 "$BENCH_DIR/report.py" --csv "$CSV" --facts "$RUN_DIR/facts.md" --tools "$RUN_DIR/tools.tsv" \
    --logs "$LOGS" --cmdline "$CMDLINE" --run-id "$RUN_ID" --elapsed "$ELAPSED" --repeat "$REPEAT" \
    --dataset "v1: $V1_FILES files, $V1_BYTES bytes copied from ${SOURCE_ROOTS[*]} (files ordered by sha1 of path, up to --size $SIZE_MB MiB); v2: $V2_FILES files, $V2_BYTES bytes (~1% of files appended to, rewritten in the middle, deleted, or added; random.Random(42)); incompressible: $RND_BYTES bytes (AES-256-CTR keystream, fixed key)" \
    --borg-mode "$BORG_MODE" --src "$SRC" --out "$STEM.md"
cat "$STEM.md"
log "results: $STEM.md and $STEM.csv (logs in $LOGS)"
