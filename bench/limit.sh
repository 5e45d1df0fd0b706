#!/usr/bin/env bash
# bench/limit.sh: how closely `--limit-upload` holds its rate. Backs up SIZE MiB of random data
# with --limit-upload KIB to the S3 gateway of .ci/services.sh, and samples every second the
# bytes the gateway holds for the repository (its data directory); reports the rate over every
# WINDOW-second window and over the whole run against the limit. See docs/performance.md
# ("Bandwidth limits") and bench/README.md.  Usage:
#   bash bench/limit.sh [--size MB] [--limit KIB] [--window SECONDS] [--coffer PATH] [--work DIR]
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$BENCH_DIR/.." && pwd)"
CMDLINE="bash bench/limit.sh $*"

SIZE_MB=200
LIMIT_KIB=2048
WINDOW=60
WORK=${COFFER_BENCH_WORK:-$BENCH_DIR/work}
COFFER_BIN=${COFFER_BIN:-$ROOT/target/release/coffer}

usage() { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --size) SIZE_MB=$2; shift 2 ;;
        --limit) LIMIT_KIB=$2; shift 2 ;;
        --window) WINDOW=$2; shift 2 ;;
        --coffer) COFFER_BIN=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "limit.sh: unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "limit.sh: $*"; exit 1; }

[[ -x $COFFER_BIN ]] || die "no coffer binary at $COFFER_BIN (cargo build --release -p coffer, or --coffer PATH)"
command -v python3 >/dev/null || die "python3 is needed for the report"

RUN_ID=limit-$(date +%Y-%m-%dT%H%M)
RUN_DIR=$WORK/runs/$RUN_ID
mkdir -p "$RUN_DIR"
# A copy: a rebuild while the benchmark runs cannot change the binary measured.
cp "$COFFER_BIN" "$RUN_DIR/coffer"
COFFER=$RUN_DIR/coffer

# ---- data: SIZE MiB of random bytes in 8 MiB files, reused while the size is the same ------------
DATA=$WORK/limit-data/$SIZE_MB
if [[ ! -f $DATA/.complete ]]; then
    log "data: $SIZE_MB MiB of random bytes in $DATA"
    rm -rf "$DATA"
    mkdir -p "$DATA"
    left=$SIZE_MB i=0
    while ((left > 0)); do
        n=$((left < 8 ? left : 8))
        head -c $((n << 20)) /dev/urandom >"$DATA/f$i"
        left=$((left - n)) i=$((i + 1))
    done
    touch "$DATA/.complete"
fi

# ---- the S3 gateway ----------------------------------------------------------------------------
export COFFER_CI_RUN=$RUN_DIR/services
COFFER_TEST_SKIP=sftp,toxiproxy,restic,borg,kopia bash "$ROOT/.ci/services.sh" install >&2
COFFER_TEST_SKIP=sftp,toxiproxy,restic,borg,kopia bash "$ROOT/.ci/services.sh" start >&2
SAMPLER=
cleanup() {
    [[ -n $SAMPLER ]] && kill "$SAMPLER" 2>/dev/null || true
    bash "$ROOT/.ci/services.sh" stop >&2 || true
}
trap cleanup EXIT
# shellcheck disable=SC1091
. "$COFFER_CI_RUN/env"
export AWS_ACCESS_KEY_ID=$COFFER_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$COFFER_TEST_S3_SECRET_KEY
export AWS_REGION=$COFFER_TEST_S3_REGION COFFER_PASSWORD=bench-password
export HOME=$RUN_DIR/home XDG_CACHE_HOME=$RUN_DIR/cache XDG_STATE_HOME=$RUN_DIR/state
PREFIX=limit-$$
REPO=s3:$COFFER_TEST_S3_ENDPOINT/$COFFER_TEST_S3_BUCKET/$PREFIX
# What the gateway holds for the repository: its objects, and the uploads it is receiving (the
# gateway's temporary directory; nothing else uses the gateway meanwhile).
HELD=("$COFFER_CI_RUN/s3-data/$COFFER_TEST_S3_BUCKET/$PREFIX" "$COFFER_CI_RUN/s3-data/$COFFER_TEST_S3_BUCKET/.sgwtmp")

log "init $REPO"
"$COFFER" --repo "$REPO" init >"$RUN_DIR/init.log" 2>&1

# ---- the backup, sampled every second ---------------------------------------------------------
SAMPLES=$RUN_DIR/samples.txt
held() { find "${HELD[@]}" -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {printf "%d", s}'; }
: >"$SAMPLES"
(
    while :; do
        printf '%s %s\n' "$(date +%s.%N)" "$(held)" >>"$SAMPLES"
        sleep 1
    done
) &
SAMPLER=$!
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
log "backup of $SIZE_MB MiB with --limit-upload $LIMIT_KIB (load average $LOAD_BEFORE)"
START=$(date +%s.%N)
"$COFFER" --repo "$REPO" --json --limit-upload "$LIMIT_KIB" backup "$DATA" >"$RUN_DIR/summary.json" \
    2>"$RUN_DIR/backup.log" || die "the backup failed; see $RUN_DIR/backup.log"
END=$(date +%s.%N)
sleep 2
kill "$SAMPLER" 2>/dev/null || true
wait "$SAMPLER" 2>/dev/null || true
SAMPLER=
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
log "check --read-data (no limit)"
"$COFFER" --repo "$REPO" check --read-data >"$RUN_DIR/check.log" 2>&1 || die "check failed; see $RUN_DIR/check.log"

# ---- the report --------------------------------------------------------------------------------
mkdir -p "$BENCH_DIR/results"
REPORT=$BENCH_DIR/results/$RUN_ID.txt
python3 - "$SAMPLES" "$RUN_DIR/summary.json" "$START" "$END" "$LIMIT_KIB" "$WINDOW" >"$RUN_DIR/report.txt" <<'EOF'
import json, sys
samples_file, summary_file, start, end, limit_kib, window = sys.argv[1:]
start, end, window = float(start), float(end), float(window)
target = int(limit_kib) * 1024
MIB = 1 << 20
samples = [tuple(map(float, l.split())) for l in open(samples_file) if l.strip()]
summary = json.load(open(summary_file))
base = samples[0][1]
# The run, for the windows: from the last sample before the first byte came to the first sample
# that holds every byte.
final = samples[-1][1]
first = max(i for i, (t, b) in enumerate(samples) if b == base and t <= end)
last = min(i for i, (t, b) in enumerate(samples) if b == final)
run = samples[first:last + 1]
def pct(rate):
    return 100.0 * (rate - target) / target
print(f"target: {target / MIB:.3f} MiB/s ({limit_kib} KiB/s); {len(samples)} samples, one a second")
print(f"bytes the gateway holds for the repository: {(final - base) / MIB:.1f} MiB")
up = summary.get("storage", {}).get("bytes_up", 0)
print(f"bytes the backup sent (its --json storage.bytes_up): {up / MIB:.1f} MiB")
print(f"backup wall time {end - start:.1f} s: {up / MIB / (end - start):.3f} MiB/s ({pct(up / (end - start)):+.1f} %)")
span = run[-1][0] - run[0][0]
held = run[-1][1] - run[0][1]
print(f"from the first byte to the last: {held / MIB:.1f} MiB in {span:.1f} s: "
      f"{held / MIB / span:.3f} MiB/s ({pct(held / span):+.1f} %)")
print(f"\nevery {window:.0f} s window (start s after the first sample of the run: MiB/s, difference):")
rates = []
for i, (t0, b0) in enumerate(run):
    later = [(t, b) for t, b in run[i:] if t - t0 >= window - 0.5]
    if not later:
        break
    t1, b1 = later[0]
    r = (b1 - b0) / (t1 - t0)
    rates.append((t0 - run[0][0], r))
for k in range(0, len(rates), 4):
    print("  " + "   ".join(f"{s:5.1f}: {r / MIB:.3f} {pct(r):+5.1f}%" for s, r in rates[k:k + 4]))
if rates:
    lo, hi = min(r for _, r in rates), max(r for _, r in rates)
    print(f"\n{len(rates)} windows: from {lo / MIB:.3f} ({pct(lo):+.1f} %) to {hi / MIB:.3f} MiB/s ({pct(hi):+.1f} %)")
    inside = sum(1 for _, r in rates if abs(pct(r)) <= 10)
    print(f"within ±10 % of the limit: {inside} of {len(rates)}")
print("\nbytes held, each second of the run (MiB):")
line = [f"{(b - run[0][1]) / MIB:.0f}" for _, b in run]
for k in range(0, len(line), 20):
    print("  " + " ".join(line[k:k + 20]))
EOF
{
    echo "# bench/limit.sh, $(date -u +%Y-%m-%dT%H:%M) UTC"
    echo "command: $CMDLINE"
    echo "coffer: $("$COFFER" version | head -1), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "load average (1, 5, 15 min): $LOAD_BEFORE before, $LOAD_AFTER after"
    echo "repository: $REPO (the Versity gateway of .ci/services.sh on loopback); check --read-data: clean"
    echo
    cat "$RUN_DIR/report.txt"
} | tee "$REPORT"
log "report: $REPORT"
