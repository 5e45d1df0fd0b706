#!/usr/bin/env bash
# bench/garage.sh: coffer on a 3-node Garage cluster (replication 3) on loopback: back up the
# real tree, kill one node in the middle of the backup, let the backup finish, then check
# --read-data and restore every snapshot bit-exact. See bench/README.md ("A distributed object
# store"). Too slow to build for every CI run: the Garage build takes about half an hour.
# Usage:
#   bash bench/garage.sh [--size MB] [--kill-after SECONDS] [--coffer PATH] [--work DIR] [--cache DIR]
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$BENCH_DIR/.." && pwd)"
GARAGE_VERSION=${GARAGE_VERSION:-2.5.0}
SIZE_MB=200
KILL_AFTER=3
CACHE=${COFFER_BENCH_CACHE:-$HOME/.cache/coffer-bench}
WORK=${COFFER_BENCH_WORK:-$BENCH_DIR/work}
COFFER_BIN=${COFFER_BIN:-$ROOT/target/release/coffer}

usage() { sed -n '6,7p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --size) SIZE_MB=$2; shift 2 ;;
        --kill-after) KILL_AFTER=$2; shift 2 ;;
        --coffer) COFFER_BIN=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --cache) CACHE=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "garage.sh: unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "garage.sh: $*"; exit 1; }
[[ -x $COFFER_BIN ]] || die "no coffer binary at $COFFER_BIN (cargo build --release -p coffer)"

# ---- Garage, built once into the cache -------------------------------------------------------
GARAGE=$CACHE/garage-$GARAGE_VERSION/bin/garage
if [[ ! -x $GARAGE ]]; then
    mkdir -p "$CACHE/logs"
    log "garage $GARAGE_VERSION: cargo install garage --locked (about 26 min on 2 cores; log $CACHE/logs/garage-install.log)"
    cargo install garage --version "$GARAGE_VERSION" --locked --root "$CACHE/garage-$GARAGE_VERSION" \
        >"$CACHE/logs/garage-install.log" 2>&1 || { tail -n 20 "$CACHE/logs/garage-install.log" >&2; die "garage build failed"; }
fi

log "data: ~$SIZE_MB MiB tree (bench/run.sh --data-only)"
bash "$BENCH_DIR/run.sh" --data-only --size "$SIZE_MB" --random-mb 1 --work "$WORK" --tools coffer >&2
V1=$WORK/data/v1 V2=$WORK/data/v2

RUN=$WORK/runs/garage-$(date +%Y-%m-%dT%H%M)
mkdir -p "$RUN"
declare -a PIDS=()
stop_all() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap stop_all EXIT

# ---- three nodes, replication 3, one zone each ---------------------------------------------
SECRET=$(openssl rand -hex 32)
PORT0=$((30000 + RANDOM % 20000))
for i in 1 2 3; do
    mkdir -p "$RUN/n$i"
    cat >"$RUN/n$i.toml" <<EOF
metadata_dir = "$RUN/n$i/meta"
data_dir = "$RUN/n$i/data"
db_engine = "sqlite"
replication_factor = 3
rpc_bind_addr = "127.0.0.1:$((PORT0 + 10 * i + 1))"
rpc_public_addr = "127.0.0.1:$((PORT0 + 10 * i + 1))"
rpc_secret = "$SECRET"
[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$((PORT0 + 10 * i))"
root_domain = ".s3.garage.localhost"
EOF
    "$GARAGE" -c "$RUN/n$i.toml" server >"$RUN/n$i.log" 2>&1 &
    PIDS[i]=$!
done
G() { "$GARAGE" -c "$RUN/n1.toml" "$@"; }
for _ in $(seq 50); do G status >/dev/null 2>&1 && break; sleep 0.2; done
for i in 2 3; do G node connect "$("$GARAGE" -c "$RUN/n$i.toml" node id -q)" >/dev/null; done
sleep 1
for id in $(G status | awk '/127.0.0.1/ {print $1}'); do G layout assign -z "z-$id" -c 10G "$id" >/dev/null; done
G layout apply --version 1 >/dev/null
KEY_ID=GK$(openssl rand -hex 12) KEY_SECRET=$(openssl rand -hex 32)
G key import --yes "$KEY_ID" "$KEY_SECRET" -n bench >/dev/null
G bucket create coffer >/dev/null
G bucket allow --read --write --owner coffer --key bench >/dev/null
log "garage: 3 nodes up (S3 on 127.0.0.1:$((PORT0 + 10)), :$((PORT0 + 20)), :$((PORT0 + 30)))"

export AWS_ACCESS_KEY_ID=$KEY_ID AWS_SECRET_ACCESS_KEY=$KEY_SECRET AWS_REGION=garage AWS_DEFAULT_REGION=garage
export COFFER_PASSWORD=bench-password XDG_CACHE_HOME=$RUN/cache XDG_STATE_HOME=$RUN/state
REPO=s3:http://127.0.0.1:$((PORT0 + 10))/coffer/repo
C() { "$COFFER_BIN" --repo "$REPO" "$@"; }
timed() { /usr/bin/time -f '%e s wall, %M KiB peak' "$@"; }

C -q init
SRC=$RUN/src
cp -a "$V1" "$SRC"
log "backup 1 of $(du -sh "$SRC" | cut -f1), node 2 killed after ${KILL_AFTER}s"
timed "$COFFER_BIN" --repo "$REPO" -q backup "$SRC" &
BACKUP=$!
sleep "$KILL_AFTER"
if kill -0 "$BACKUP" 2>/dev/null; then
    kill -9 "${PIDS[2]}"; log "node 2 killed (SIGKILL) while the backup ran"
else
    log "warning: the backup finished before node 2 could be killed; use a larger --size"
fi
wait "$BACKUP" || die "backup 1 failed with one node of three down"
log "backup 1 completed with node 2 down"
rsync -a --delete "$V2/" "$SRC/" 2>/dev/null || { rm -rf "$SRC"; cp -a "$V2" "$SRC"; }
timed "$COFFER_BIN" --repo "$REPO" -q backup "$SRC" || die "backup 2 failed with one node down"
log "backup 2 completed with node 2 down"
timed "$COFFER_BIN" --repo "$REPO" -q check --read-data || die "check --read-data found damage"
log "check --read-data clean"

# Every snapshot restores bit-exact: the first is v1, the second v2.
i=0
for id in $(C --json snapshots | python3 -c 'import json,sys; [print(s["id"]) for s in json.load(sys.stdin)]'); do
    i=$((i + 1)); expect=$V1; [[ $i == 2 ]] && expect=$V2
    out=$RUN/restore-$i; mkdir -p "$out"
    timed "$COFFER_BIN" --repo "$REPO" -q restore "$id" --target "$out"
    diff -r --no-dereference "$expect" "$out$SRC" >/dev/null || die "snapshot $id differs from $(basename "$expect")"
    log "snapshot ${id:0:8} restores bit-exact ($(basename "$expect"))"
    rm -rf "$out"
done
log "done: every snapshot restored bit-exact with one node of three down"
