#!/usr/bin/env bash
# bench/serve_load.sh: N clients backing up at once into one repository, through
# `coffer serve` and straight to the same S3 storage (the Versity gateway of
# .ci/services.sh), on loopback. Reports, per path: the wall time of the N
# backups, throughput, the clients' request latency (median of their p50, worst
# of their p99, from each backup's `--json` summary), and for the server its
# peak RSS; then checks that every snapshot is there and `check --read-data` is
# clean, and restores two snapshots. See bench/README.md ("Server under load").
# With --latency MS, the clients reach the server, and S3 on the direct path, through a
# toxiproxy proxy adding MS of round trip (the server stays next to its storage), as
# clients over a network would.
# Usage: bash bench/serve_load.sh [--clients 32] [--mb 8] [--latency MS] [--coffer PATH] [--work DIR]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLIENTS=32
MB=8
LATENCY=0
COFFER=${COFFER_BIN:-$ROOT/target/release/coffer}
WORK=${COFFER_BENCH_WORK:-$ROOT/bench/work}/serve-load
while [[ $# -gt 0 ]]; do
    case "$1" in
        --clients) CLIENTS=$2; shift 2 ;;
        --mb) MB=$2; shift 2 ;;
        --latency) LATENCY=$2; shift 2 ;;
        --coffer) COFFER=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        *) sed -n '2,13p' "$0" >&2; exit 2 ;;
    esac
done
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

rm -rf "$WORK" && mkdir -p "$WORK"
export COFFER_CI_RUN=$WORK/services
bash "$ROOT/.ci/services.sh" start >/dev/null
trap 'bash "$ROOT/.ci/services.sh" stop >/dev/null 2>&1 || true; kill $SERVER_PID 2>/dev/null || true' EXIT
. "$COFFER_CI_RUN/env"
export AWS_ACCESS_KEY_ID=$COFFER_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$COFFER_TEST_S3_SECRET_KEY
export AWS_REGION=$COFFER_TEST_S3_REGION COFFER_PASSWORD=bench

# proxied NAME HOST:PORT: an endpoint reaching HOST:PORT with LATENCY ms of added round
# trip (half each way); the address itself when LATENCY is 0.
proxied() {
    local name=$1 upstream=$2 listen
    [[ $LATENCY -eq 0 ]] && { echo "$upstream"; return; }
    api() { curl -sSf --max-time 10 -X "$1" "$COFFER_TEST_TOXIPROXY$2" ${3:+-d "$3"}; }
    api DELETE "/proxies/$name" >/dev/null 2>&1 || true
    listen=$(api POST /proxies "{\"name\":\"$name\",\"listen\":\"127.0.0.1:0\",\"upstream\":\"$upstream\",\"enabled\":true}" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["listen"])')
    for stream in upstream downstream; do
        api POST "/proxies/$name/toxics" \
            "{\"name\":\"lat-$stream\",\"type\":\"latency\",\"stream\":\"$stream\",\"attributes\":{\"latency\":$((LATENCY / 2))}}" >/dev/null
    done
    echo "$listen"
}

# Each client: MB MiB of its own random data, and 2 MiB shared by all (deduplicated).
python3 - "$WORK/src" "$CLIENTS" "$MB" <<'EOF'
import os, random, sys
root, n, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
shared = random.Random(0).randbytes(2 << 20)
for c in range(n):
    d = os.path.join(root, f"c{c:02d}")
    os.makedirs(d)
    r = random.Random(c + 1)
    for f in range(mb):
        open(os.path.join(d, f"f{f}"), "wb").write(r.randbytes(1 << 20))
    open(os.path.join(d, "shared"), "wb").write(shared)
EOF
TOTAL_MB=$((CLIENTS * (MB + 2)))

# client HOME: its own writer key and state.
client() { local c=$1; shift; env -u XDG_STATE_HOME -u XDG_CACHE_HOME HOME="$WORK/home/c$c" "$COFFER" "$@"; }

# run_all LABEL: the N backups at once; prints the figures.
run_all() {
    local label=$1 t0 t1
    t0=$(date +%s.%N)
    for ((c = 0; c < CLIENTS; c++)); do
        client "$c" --json backup "$WORK/src/c$(printf %02d "$c")" >"$WORK/$label-c$c.json" 2>"$WORK/$label-c$c.err" &
    done
    local failed=0
    for job in $(jobs -p); do
        [[ $job == "${SERVER_PID:-}" ]] && continue
        wait "$job" || failed=$((failed + 1))
    done
    t1=$(date +%s.%N)
    python3 - "$WORK" "$label" "$CLIENTS" "$t0" "$t1" "$TOTAL_MB" "$failed" <<'EOF'
import json, statistics, sys
work, label, n, t0, t1, total, failed = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
p50, p99, puts = [], [], 0
for c in range(n):
    try:
        v = json.load(open(f"{work}/{label}-c{c}.json"))
    except Exception:
        continue
    s = v["storage"]
    p50.append(s["latency_ms"]["p50"]); p99.append(s["latency_ms"]["p99"]); puts += s["put"]
wall = t1 - t0
print(f"| {label} | {n} | {failed} | {wall:.1f} s | {total / wall:.1f} MiB/s | {puts} | "
      f"{statistics.median(p50) if p50 else float('nan'):.1f} ms | {max(p99) if p99 else float('nan'):.1f} ms |")
EOF
}

echo "Round trip added between the clients and their storage: $LATENCY ms"
echo
echo "| path | clients | failed | wall | throughput | PUTs | median p50 | worst p99 |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"

# ---- straight to S3 ------------------------------------------------------------------
S3_REPO="s3:http://$(proxied load-s3 "${COFFER_TEST_S3_ENDPOINT#http://}")/$COFFER_TEST_S3_BUCKET/load-direct-$$"
client 0 --repo "$S3_REPO" -q init --kdf-log-n 10 --insecure-kdf
export COFFER_REPOSITORY=$S3_REPO
run_all direct

# ---- through coffer serve ------------------------------------------------------------
SRV_REPO="s3:$COFFER_TEST_S3_ENDPOINT/$COFFER_TEST_S3_BUCKET/load-served-$$"
COFFER_REPOSITORY=$SRV_REPO "$COFFER" -q init --kdf-log-n 10 --insecure-kdf
STATE=$WORK/serve-state
/usr/bin/time -f "%M" -o "$WORK/serve.rss" "$COFFER" --repo "$SRV_REPO" serve --state-dir "$STATE" \
    --listen 127.0.0.1:0 --insecure-http >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVER_PID=$!
until grep -q "listening on" "$WORK/serve.out" 2>/dev/null; do sleep 0.1; done
ADDR=$(grep -o 'http://[0-9.:]*' "$WORK/serve.out" | head -1)
KEY=$("$COFFER" serve --state-dir "$STATE" --json key add load --level append)
export COFFER_SERVER_KEY_ID=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$KEY")
export COFFER_SERVER_SECRET=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["secret"])' "$KEY")
export COFFER_SERVER_ALLOW_HTTP=1 COFFER_REPOSITORY=coffer:http://$(proxied load-serve "${ADDR#http://}")/coffer
# Each client's writer key on the allow-list (a first backup creates it and is refused;
# it backs up a file of its own, so that the measured backups find nothing stored yet).
for ((c = 0; c < CLIENTS; c++)); do
    head -c 64 /dev/urandom >"$WORK/probe-c$c"
    client "$c" -q backup "$WORK/probe-c$c" >/dev/null 2>&1 || true
    w=$(client "$c" --json writers | python3 -c 'import json,sys; print([x["public_key"] for x in json.load(sys.stdin) if x["this_client"]][0])')
    "$COFFER" serve --state-dir "$STATE" -q writer allow "$w"
done
run_all served
SERVE_PID=$(pgrep -P $SERVER_PID)
hwm() { awk '/VmHWM/ {print int($2 / 1024)}' /proc/$SERVE_PID/status; }
AFTER_BACKUPS=$(hwm)

# ---- every snapshot whole --------------------------------------------------------------
n=$(client 0 --json snapshots | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
log "snapshots through the server: $n (expected $CLIENTS)"
[[ $n -eq $CLIENTS ]] || { log "snapshots missing"; exit 1; }
client 0 -q check --read-data && log "check --read-data through the server: clean"
AFTER_CHECK=$(hwm)
for c in 0 $((CLIENTS - 1)); do
    d=$(printf %02d "$c")
    id=$(client 0 --json snapshots --path "$WORK/src/c$d" | python3 -c 'import json,sys; print(json.load(sys.stdin)[-1]["id"])')
    client 0 -q restore "$id" --target "$WORK/out$c"
    diff -r "$WORK/src/c$d" "$WORK/out$c$WORK/src/c$d" && log "client $c restored identical"
done
pkill -TERM -P $SERVER_PID; wait $SERVER_PID 2>/dev/null || true
echo
echo "server peak RSS: $AFTER_BACKUPS MB after the backups, $AFTER_CHECK MB after check --read-data, \
$(($(tail -1 "$WORK/serve.rss") / 1024)) MB at the end; $TOTAL_MB MiB backed up per path; $(nproc) cores"
