#!/usr/bin/env bash
# Side by side: `coffer import kopia:CONFIG` against `kopia snapshot restore` of the same
# snapshots into a tmpfs (docs/design.md#import-from-kopia, issue "Bring your history").
#
# A kopia repository on the file system (kopia's defaults) gets three snapshots of a real
# tree: v1 (files copied from /usr/share and /usr/lib, ordered by the SHA-1 of their path,
# up to --size MiB), v2 (v1 with ~1% of the files changed, dataset.py mutate 42) and v3
# (v2 mutated again, seed 43). Each round then, alternating the order:
#   - kopia snapshot restore of each snapshot into a fresh directory of /dev/shm;
#   - coffer import of the whole repository into a fresh coffer repository, each
#     snapshot's own time read from its summary (`--json`).
# Peak memory is /usr/bin/time's maximum resident set size of the whole command (for
# coffer's import, the largest of coffer and the kopia server it runs).
#
# Usage: bench/import_vs_kopia.sh [--size MIB] [--rounds N] [--work DIR]
# Needs: COFFER_BIN (default target/release/coffer), KOPIA_BIN (default the pinned test
# binary ~/.cache/coffer-ci/bin/kopia-v0.22.3), python3, /usr/bin/time.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
SIZE_MB=1024
ROUNDS=2
WORK=${COFFER_BENCH_WORK:-$BENCH_DIR/work/import-kopia}
COFFER_BIN=${COFFER_BIN:-$ROOT/target/release/coffer}
KOPIA_BIN=${KOPIA_BIN:-$HOME/.cache/coffer-ci/bin/kopia-v0.22.3}
while [[ $# -gt 0 ]]; do
    case $1 in
        --size) SIZE_MB=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ -x $COFFER_BIN ]] || { echo "no coffer binary at $COFFER_BIN: cargo build --release -p coffer" >&2; exit 1; }
[[ -x $KOPIA_BIN ]] || { echo "no kopia at $KOPIA_BIN: bash .ci/services.sh install" >&2; exit 1; }

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
export KOPIA_PASSWORD=bench-kopia COFFER_PASSWORD=bench-coffer COFFER_KOPIA=$KOPIA_BIN
export KOPIA_CHECK_FOR_UPDATES=false KOPIA_LOG_DIR=$WORK/kopia-base/logs
export KOPIA_CACHE_DIRECTORY=$WORK/kopia-base/cache
CONFIG=$WORK/kopia-base/repository.config
KOPIA_REPO=$WORK/kopia-repo
SRC=$WORK/src
SHM=/dev/shm/coffer-import-kopia-bench
mkdir -p "$WORK"
kopia() { "$KOPIA_BIN" --config-file "$CONFIG" "$@"; }

if [[ ! -f $WORK/ready-$SIZE_MB ]]; then
    rm -rf "$SRC" "$KOPIA_REPO" "$WORK/kopia-base" "$WORK"/ready-*
    log "data: ~$SIZE_MB MiB from /usr/share /usr/lib"
    mkdir -p "$SRC" "$WORK/kopia-base"
    python3 "$BENCH_DIR/dataset.py" select "$SIZE_MB" /usr/share /usr/lib |
        (cd / && xargs -0 cp --parents -a -t "$SRC" 2>/dev/null || true)
    kopia repository create filesystem --path "$KOPIA_REPO" >/dev/null 2>&1
    kopia snapshot create --tags version:v1 "$SRC" >/dev/null 2>&1
    python3 "$BENCH_DIR/dataset.py" mutate "$SRC" 42 >/dev/null
    kopia snapshot create --tags version:v2 "$SRC" >/dev/null 2>&1
    python3 "$BENCH_DIR/dataset.py" mutate "$SRC" 43 >/dev/null
    kopia snapshot create --tags version:v3 "$SRC" >/dev/null 2>&1
    touch "$WORK/ready-$SIZE_MB"
fi
mapfile -t SNAPS < <(kopia snapshot list --all --json |
    python3 -c 'import json,sys; [print(s["id"]) for s in sorted(json.load(sys.stdin), key=lambda s: s["startTime"])]')
BYTES=$(du -sb "$SRC" | cut -f1)
log "kopia repository: ${#SNAPS[@]} snapshots of $BYTES bytes (last)"

kopia_round() {
    local i
    for i in 0 1 2; do
        rm -rf "$SHM"; mkdir -p "$SHM"
        /usr/bin/time -f '%e %M' -o "$WORK/time.out" "$KOPIA_BIN" --config-file "$CONFIG" snapshot restore "${SNAPS[$i]}" "$SHM" >/dev/null 2>&1
        echo "kopia restore v$((i + 1)) $(tail -1 "$WORK/time.out")"
    done
    rm -rf "$SHM"
}

# shellcheck source=lib/import.sh
. "$BENCH_DIR/lib/import.sh"
coffer_round() { coffer_import_round "kopia:$CONFIG"; }

for r in $(seq 1 "$ROUNDS"); do
    if (( r % 2 )); then kopia_round; coffer_round; else coffer_round; kopia_round; fi | sed "s/^/round $r: /"
done
