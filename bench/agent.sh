#!/usr/bin/env bash
# bench/agent.sh: what the agent costs. (1) Idle: starts `coffer agent` with two jobs that are not
# due (and the metrics endpoint on, scraped once a minute), waits IDLE seconds, and reports its
# resident memory (now and peak) and the CPU seconds it used, per hour. (2) A/B: the same first
# backup of a SIZE MiB tree into a fresh local repository, `coffer backup` against `coffer run`
# (the job's backup, then its stats step), alternating, ROUNDS each; reports wall and CPU time
# (the process and its children) and the ratio. See docs/performance.md ("Agent").  Usage:
#   bash bench/agent.sh [--idle SECONDS] [--size MB] [--rounds N] [--coffer PATH] [--work DIR]
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$BENCH_DIR/.." && pwd)"
IDLE=600
SIZE_MB=1024
ROUNDS=5
WORK=${COFFER_BENCH_WORK:-$BENCH_DIR/work}
COFFER_BIN=${COFFER_BIN:-$ROOT/target/release/coffer}

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --idle) IDLE=$2; shift 2 ;;
        --size) SIZE_MB=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --coffer) COFFER_BIN=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "agent.sh: unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "agent.sh: $*"; exit 1; }
[[ -x $COFFER_BIN ]] || die "no coffer binary at $COFFER_BIN (cargo build --release -p coffer, or --coffer PATH)"
[[ -x /usr/bin/time ]] || die "GNU time (/usr/bin/time) is needed"

RUN=$WORK/agent-$(date +%Y-%m-%dT%H%M%S)
mkdir -p "$RUN/home" "$RUN/config"
export HOME=$RUN/home XDG_CONFIG_HOME=$RUN/config XDG_STATE_HOME=$RUN/state
printf 'bench-password\n' >"$RUN/pass"
export COFFER_PASSWORD_FILE=$RUN/pass
log "work directory $RUN"

# ---------------------------------------------------------------- idle
cat >"$RUN/jobs.toml" <<EOF
[agent]
metrics = "127.0.0.1:0"

[job.a]
repository = "$RUN/repo-idle"
password-file = "$RUN/pass"
paths = ["$RUN/home"]
schedule = "yearly"

[job.b]
repository = "$RUN/repo-idle"
password-file = "$RUN/pass"
paths = ["$RUN/home"]
schedule = "0 3 1 1 *"
EOF
"$COFFER_BIN" --repo "$RUN/repo-idle" init >/dev/null
"$COFFER_BIN" agent --jobs "$RUN/jobs.toml" 2>"$RUN/agent.log" &
AGENT=$!
trap 'kill $AGENT 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q "metrics at" "$RUN/agent.log" && break; sleep 0.1; done
ADDR=$(sed -n 's/.*metrics at http:\/\/\([^/]*\)\/metrics.*/\1/p' "$RUN/agent.log")
ticks() { awk '{print $14 + $15}' "/proc/$AGENT/stat"; }
HZ=$(getconf CLK_TCK)
T0=$(ticks)
START=$(date +%s.%N)
log "idle agent $AGENT for $IDLE s (metrics at $ADDR, scraped every 60 s)"
ELAPSED=0
while (( ELAPSED < IDLE )); do
    STEP=$(( IDLE - ELAPSED < 60 ? IDLE - ELAPSED : 60 ))
    sleep "$STEP"
    ELAPSED=$(( ELAPSED + STEP ))
    [[ -n $ADDR ]] && curl -sf "http://$ADDR/metrics" >/dev/null
done
T1=$(ticks)
END=$(date +%s.%N)
RSS=$(awk '/^VmRSS/ {print $2}' "/proc/$AGENT/status")
HWM=$(awk '/^VmHWM/ {print $2}' "/proc/$AGENT/status")
THREADS=$(awk '/^Threads/ {print $2}' "/proc/$AGENT/status")
kill -TERM $AGENT; wait $AGENT || true
trap - EXIT
python3 - "$T0" "$T1" "$HZ" "$START" "$END" "$RSS" "$HWM" "$THREADS" <<'PY'
import sys
t0, t1, hz, start, end, rss, hwm, threads = sys.argv[1:]
cpu = (int(t1) - int(t0)) / int(hz)
wall = float(end) - float(start)
print(f"idle: {wall:.0f} s, CPU {cpu:.2f} s ({cpu / wall * 3600:.2f} s per hour), "
      f"RSS {int(rss) / 1024:.1f} MiB now, {int(hwm) / 1024:.1f} MiB peak, {threads} threads")
PY

# ---------------------------------------------------------------- A/B
SRC=$RUN/src
log "making $SIZE_MB MiB of data under $SRC"
python3 - "$SRC" "$SIZE_MB" <<'PY'
import os, random, sys
root, size = sys.argv[1], int(sys.argv[2]) << 20
rng = random.Random(42)
os.makedirs(root, exist_ok=True)
written, i = 0, 0
while written < size:
    d = os.path.join(root, f"d{i // 100}")
    os.makedirs(d, exist_ok=True)
    n = min(rng.choice([4096, 65536, 1 << 20, 4 << 20]), size - written)
    # half compressible text, half random
    data = os.urandom(n // 2) + (b"coffer agent bench line %d\n" % i) * (n // 2 // 26 + 1)
    with open(os.path.join(d, f"f{i}"), "wb") as f:
        f.write(data[:n])
    written += n
    i += 1
print(f"{i} files")
PY
cat >"$RUN/ab.toml" <<EOF
[job.ab]
repository = "$RUN/repo-ab"
password-file = "$RUN/pass"
paths = ["$SRC"]
EOF
measure() { # label command...: prints "label wall cpu"
    local label=$1; shift
    rm -rf "$RUN/repo-ab" "$RUN/state"
    "$COFFER_BIN" --repo "$RUN/repo-ab" init >/dev/null
    sync
    /usr/bin/time -f "%e %U %S" -o "$RUN/time" "$@" >/dev/null 2>>"$RUN/ab.log"
    read -r wall user sys <"$RUN/time"
    echo "$label $wall $(python3 -c "print($user + $sys)")"
}
: >"$RUN/ab.txt"
for r in $(seq "$ROUNDS"); do
    measure cli "$COFFER_BIN" --repo "$RUN/repo-ab" backup "$SRC" | tee -a "$RUN/ab.txt"
    measure agent "$COFFER_BIN" run --jobs "$RUN/ab.toml" ab | tee -a "$RUN/ab.txt"
done
python3 - "$RUN/ab.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for what, i in (("wall", 1), ("CPU", 2)):
    cli = [float(r[i]) for r in rows if r[0] == "cli"]
    agent = [float(r[i]) for r in rows if r[0] == "agent"]
    mc, ma = statistics.median(cli), statistics.median(agent)
    print(f"A/B {what}: coffer backup median {mc:.2f} s {cli}, coffer run median {ma:.2f} s {agent}, "
          f"ratio {ma / mc:.3f}")
PY
log "done; rm -rf $RUN to free the space"
