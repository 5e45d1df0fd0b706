#!/usr/bin/env bash
# Side by side: `coffer import borg:REPO` against `borg export-tar ARCHIVE - > /dev/null`
# of the same archives (docs/design.md#import-from-borg, issue "Bring your history").
#
# A borg repository (repokey, borg's default chunker and lz4) gets three archives of a
# real tree: v1 (files copied from /usr/share and /usr/lib, ordered by the SHA-1 of their
# path, up to --size MiB), v2 (v1 with ~1% of the files changed, dataset.py mutate 42)
# and v3 (v2 mutated again, seed 43). Each round then, alternating the order:
#   - borg export-tar of each archive to /dev/null;
#   - coffer import of the whole repository into a fresh coffer repository, each
#     archive's own time read from its summary (`--json`).
# Peak memory is /usr/bin/time's maximum resident set size of the whole command (for
# coffer's import that is coffer alone: the borg processes it runs are its children, whose
# peak /usr/bin/time does not add; the script prints borg's export-tar peak beside it).
#
# Usage: bench/import_vs_borg.sh [--size MIB] [--rounds N] [--work DIR]
# Needs: COFFER_BIN (default target/release/coffer), BORG_BIN (default /usr/bin/borg),
# python3, /usr/bin/time.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
SIZE_MB=1024
ROUNDS=2
WORK=${COFFER_BENCH_WORK:-$BENCH_DIR/work/import-borg}
COFFER_BIN=${COFFER_BIN:-$ROOT/target/release/coffer}
BORG_BIN=${BORG_BIN:-/usr/bin/borg}
while [[ $# -gt 0 ]]; do
    case $1 in
        --size) SIZE_MB=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ -x $COFFER_BIN ]] || { echo "no coffer binary at $COFFER_BIN: cargo build --release -p coffer" >&2; exit 1; }
[[ -x $BORG_BIN ]] || { echo "no borg at $BORG_BIN: bash .ci/services.sh install" >&2; exit 1; }

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
export BORG_PASSPHRASE=bench-borg COFFER_PASSWORD=bench-coffer COFFER_BORG=$BORG_BIN
export BORG_BASE_DIR=$WORK/borg-base
BORG_REPO=$WORK/borg-repo
SRC=$WORK/src
mkdir -p "$WORK"

if [[ ! -f $WORK/ready-$SIZE_MB ]]; then
    rm -rf "$SRC" "$BORG_REPO" "$BORG_BASE_DIR" "$WORK"/ready-*
    log "data: ~$SIZE_MB MiB from /usr/share /usr/lib"
    mkdir -p "$SRC"
    python3 "$BENCH_DIR/dataset.py" select "$SIZE_MB" /usr/share /usr/lib |
        (cd / && xargs -0 cp --parents -a -t "$SRC" 2>/dev/null || true)
    "$BORG_BIN" init -e repokey "$BORG_REPO" >/dev/null
    "$BORG_BIN" create "$BORG_REPO::v1" "$SRC"
    python3 "$BENCH_DIR/dataset.py" mutate "$SRC" 42 >/dev/null
    "$BORG_BIN" create "$BORG_REPO::v2" "$SRC"
    python3 "$BENCH_DIR/dataset.py" mutate "$SRC" 43 >/dev/null
    "$BORG_BIN" create "$BORG_REPO::v3" "$SRC"
    touch "$WORK/ready-$SIZE_MB"
fi
BYTES=$(du -sb "$SRC" | cut -f1)
log "borg repository: 3 archives of $BYTES bytes (last)"

borg_round() {
    local i out
    for i in 1 2 3; do
        out=$( { /usr/bin/time -f '%e %M' "$BORG_BIN" export-tar "$BORG_REPO::v$i" - >/dev/null; } 2>&1 | tail -1)
        echo "borg export-tar v$i $out"
    done
}

# shellcheck source=lib/import.sh
. "$BENCH_DIR/lib/import.sh"
coffer_round() { coffer_import_round "borg:$BORG_REPO"; }

for r in $(seq 1 "$ROUNDS"); do
    if (( r % 2 )); then borg_round; coffer_round; else coffer_round; borg_round; fi | sed "s/^/round $r: /"
done
