#!/usr/bin/env bash
# bench/ui.sh: what the web interface costs and how fast it answers (docs/performance.md, "UI").
# In one local repository: a directory of ENTRIES files, a FILE_MB MiB file of random bytes, and
# SNAPS snapshots in all; a jobs file of JOBS jobs on that repository. Then, with `coffer ui`:
#   (1) idle memory: the UI's RSS after start and after the measurements, against `coffer agent`'s
#       with the same jobs file, both idle;
#   (2) the first page (1,000 entries) of the large directory, cold (first request) and warm, as
#       the server's own time (Server-Timing) and curl's;
#   (3) the dashboard and the snapshot list, server time, ROUNDS each;
#   (4) the download of the large file through the UI against `coffer dump` of it, after one
#       untimed read, alternating (each round the other first), ROUNDS each, to /dev/null: wall
#       time and the ratio of throughputs.
# Usage: bash bench/ui.sh [--entries N] [--file-mb N] [--snaps N] [--jobs N] [--rounds N] [--coffer PATH] [--work DIR]
#        [--reuse RUN_DIR]  (measure again on the repository an earlier run made there)
# Two snapshots are backups; the rest are copies of the second under four hosts, written by the
# prefill_snapshots example in seconds.
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$BENCH_DIR/.." && pwd)"
ENTRIES=100000
FILE_MB=1024
SNAPS=10000
JOBS=50
ROUNDS=3
WORK=${COFFER_BENCH_WORK:-$BENCH_DIR/work}
COFFER_BIN=${COFFER_BIN:-$ROOT/target/release/coffer}
PREFILL=${COFFER_PREFILL_SNAPSHOTS:-$ROOT/target/release/examples/prefill_snapshots}
REUSE=

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --entries) ENTRIES=$2; shift 2 ;;
        --file-mb) FILE_MB=$2; shift 2 ;;
        --snaps) SNAPS=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --coffer) COFFER_BIN=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --reuse) REUSE=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "ui.sh: unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ui.sh: $*"; exit 1; }
[[ -x $COFFER_BIN ]] || die "no coffer binary at $COFFER_BIN (cargo build --release -p coffer, or --coffer PATH)"
[[ -n $REUSE || -x $PREFILL ]] ||
    die "no $PREFILL (cargo build --release -p coffer-core --example prefill_snapshots, or COFFER_PREFILL_SNAPSHOTS)"
command -v curl >/dev/null || die "curl is needed"

RUN=${REUSE:-$WORK/ui-$(date +%Y-%m-%dT%H%M%S)}
mkdir -p "$RUN/home" "$RUN/config" "$RUN/src/big" "$RUN/tiny"
export HOME=$RUN/home XDG_CONFIG_HOME=$RUN/config XDG_STATE_HOME=$RUN/state
printf 'bench-password\n' >"$RUN/pass"
export COFFER_PASSWORD_FILE=$RUN/pass COFFER_REPOSITORY=$RUN/repo
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
log "work directory $RUN"

if [[ -z $REUSE ]]; then
    "$COFFER_BIN" init --kdf-log-n 10 --insecure-kdf >/dev/null
    python3 -c 'import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    open(os.path.join(d, "f%07d" % i), "w").write(str(i))' "$RUN/src/big" "$ENTRIES"
    head -c $((FILE_MB << 20)) /dev/urandom >"$RUN/src/large.bin"
    SNAP=$("$COFFER_BIN" --json backup "$RUN/src" | python3 -c 'import json,sys; print(json.load(sys.stdin)["snapshot_id"])')
    log "backed up $ENTRIES entries and $FILE_MB MiB"
    echo x >"$RUN/tiny/x"
    "$COFFER_BIN" backup --host host0 "$RUN/tiny" >/dev/null
    t0=$SECONDS
    # The rest as copies of that one, written in one process (a backup each would read the
    # whole history first: hours at 10,000).
    COFFER_PASSWORD=bench-password "$PREFILL" "$RUN/repo" $((SNAPS - 2)) 4 >/dev/null
    made=$SNAPS
    log "$made snapshots in all ($((SECONDS - t0)) s for the copies)"
else
    SNAP=$("$COFFER_BIN" --json snapshots | python3 -c 'import json,sys
d=json.load(sys.stdin)
print([x["id"] for x in d if not x["snapshot"]["hostname"].startswith("host")][0])')
    made=$(ls "$RUN/repo/snapshots" | wc -l)
    log "reusing $RUN: $made snapshots"
fi
{
    for ((j = 0; j < JOBS; j++)); do
        printf '[job.j%02d]\nrepository = "%s"\npassword-file = "%s"\npaths = ["%s"]\nschedule = "yearly"\n\n' \
            "$j" "$RUN/repo" "$RUN/pass" "$RUN/tiny"
    done
} >"$RUN/jobs.toml"
export COFFER_JOBS=$RUN/jobs.toml COFFER_AGENT_STATE=$RUN/state/agent.sqlite
# A few runs in the history.
for j in 00 01 02; do "$COFFER_BIN" run "j$j" >/dev/null; done

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# anon_file PID: its RssAnon and RssFile in MiB, "A anon + F file".
anon_file() { awk '/^RssAnon:/ {a = $2} /^RssFile:/ {f = $2} END {printf "%d anon + %d file", a / 1024, f / 1024}' "/proc/$1/status"; }

"$COFFER_BIN" agent 2>"$RUN/agent.err" &
AGENT=$!
PIDS+=("$AGENT")
"$COFFER_BIN" ui --listen 127.0.0.1:0 2>"$RUN/ui.err" &
UI=$!
PIDS+=("$UI")
for _ in $(seq 1 600); do grep -q 'serving http' "$RUN/ui.err" && break; sleep 0.1; done
BASE=$(grep -o 'http://127.0.0.1:[0-9]*' "$RUN/ui.err" | head -1)
[[ -n $BASE ]] || die "coffer ui did not start: $(cat "$RUN/ui.err")"
sleep 10
UI_RSS0=$(rss_kib "$UI")
UI_AF0=$(anon_file "$UI")
AGENT_RSS=$(rss_kib "$AGENT")
TOKEN=$(cat "$RUN/state/coffer/ui/login-token")
curl -sf -c "$RUN/jar" -H 'Content-Type: application/json' -d "{\"secret\": \"$TOKEN\"}" "$BASE/api/v1/login" >/dev/null

# server_ms URL: the Server-Timing of one GET, in ms; curl's total time after it.
server_ms() {
    local out
    out=$(curl -s -b "$RUN/jar" -o /dev/null -D - -w 'total=%{time_total}\n' "$1")
    printf '%s %s\n' "$(grep -i '^server-timing:' <<<"$out" | sed 's/.*dur=\([0-9.]*\).*/\1/' | tr -d '\r')" \
        "$(grep '^total=' <<<"$out" | cut -d= -f2)"
}
REL=${RUN#/}/src
read -r COLD_S COLD_T < <(server_ms "$BASE/api/v1/repos/default/snapshots/$SNAP/entries?path=$REL/big&limit=1000")
read -r WARM_S WARM_T < <(server_ms "$BASE/api/v1/repos/default/snapshots/$SNAP/entries?path=$REL/big&offset=50000&limit=1000")
read -r PAGE_S PAGE_T < <(server_ms "$BASE/repos/default/snapshots/$SNAP?path=$REL/big")
echo "first page of $ENTRIES entries: cold ${COLD_S} ms server (${COLD_T} s curl), warm ${WARM_S} ms (${WARM_T} s), HTML page ${PAGE_S} ms"
for ((r = 1; r <= ROUNDS; r++)); do
    read -r D_S D_T < <(server_ms "$BASE/")
    read -r L_S L_T < <(server_ms "$BASE/repos/default")
    read -r A_S A_T < <(server_ms "$BASE/api/v1/jobs")
    echo "round $r: dashboard ($JOBS jobs, $made snapshots) ${D_S} ms server (${D_T} s curl); snapshot list ${L_S} ms; /api/v1/jobs ${A_S} ms"
done

# One untimed read first, so that no round compares packs read cold with packs read warm.
"$COFFER_BIN" dump "$SNAP" "/$REL/large.bin" >/dev/null
for ((r = 1; r <= ROUNDS; r++)); do
    order="ui dump"
    ((r % 2 == 0)) && order="dump ui"
    for what in $order; do
        t=$(date +%s.%N)
        if [[ $what == ui ]]; then
            curl -sf -b "$RUN/jar" -o /dev/null "$BASE/api/v1/repos/default/snapshots/$SNAP/content?path=$REL/large.bin"
        else
            "$COFFER_BIN" dump "$SNAP" "/$REL/large.bin" >/dev/null
        fi
        e=$(date +%s.%N)
        printf -v "T_$what" '%s' "$(awk -v a="$t" -v b="$e" 'BEGIN {printf "%.2f", b - a}')"
    done
    echo "round $r: download through the UI ${T_ui} s, coffer dump ${T_dump} s; UI throughput / dump's = $(awk -v u="$T_ui" -v d="$T_dump" 'BEGIN {printf "%.3f", d / u}')"
done
sleep 5
UI_RSS1=$(rss_kib "$UI")
# The decoded trees are let go after a minute unused (checked every 15 s).
sleep 80
UI_RSS2=$(rss_kib "$UI")
UI_AF2=$(anon_file "$UI")
sleep 60
UI_AF3=$(anon_file "$UI")
# Where the UI's anonymous memory lies: the main heap ([heap]) or other mappings (glibc's other
# heaps, thread stacks, large blocks).
UI_WHERE=$(awk '/^[0-9a-f]+-[0-9a-f]+ / {heap = ($NF == "[heap]")} /^Anonymous:/ {if (heap) h += $2; else o += $2}
    END {printf "%d MiB in [heap], %d MiB elsewhere", h / 1024, o / 1024}' "/proc/$UI/smaps")
AGENT_RSS=$(rss_kib "$AGENT")
AGENT_AF=$(anon_file "$AGENT")
echo "idle RSS: coffer ui $((UI_RSS0 / 1024)) MiB after start, $((UI_RSS1 / 1024)) MiB after the measurements, $((UI_RSS2 / 1024)) MiB 80 s later; coffer agent $((AGENT_RSS / 1024)) MiB; UI above the agent: $(((UI_RSS0 - AGENT_RSS) / 1024)), $(((UI_RSS1 - AGENT_RSS) / 1024)), $(((UI_RSS2 - AGENT_RSS) / 1024)) MiB"
echo "idle RSS by kind: coffer ui $UI_AF0 MiB after start, $UI_AF2 MiB when idle (80 s), $UI_AF3 MiB 60 s later; coffer agent $AGENT_AF MiB"
echo "the UI's anonymous memory when idle: $UI_WHERE"
