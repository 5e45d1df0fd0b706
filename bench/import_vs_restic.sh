#!/usr/bin/env bash
# Side by side: `coffer import restic:REPO` against `restic restore` of the same
# snapshots into a tmpfs (docs/design.md#import, issue "Bring your history").
#
# A restic repository (version 2, compression auto) gets three snapshots of a real
# tree: v1 (files copied from /usr/share and /usr/lib, ordered by the SHA-1 of their
# path, up to --size MiB), v2 (v1 with ~1% of the files changed, dataset.py mutate 42)
# and v3 (v2 mutated again, seed 43). Each round then, alternating the order:
#   - restic restore of each snapshot into a fresh directory of /dev/shm;
#   - coffer import of the whole repository into a fresh coffer repository, each
#     snapshot's own time read from its summary (`--json`).
# Peak memory is /usr/bin/time's maximum resident set size of the whole command.
# With --s3-latency MS the restic repository is served by the test S3 server of
# .ci/services.sh (started here, stopped at the end) through a toxiproxy proxy adding
# MS of round trip, and both tools read it from there.
#
# Usage: bench/import_vs_restic.sh [--size MIB] [--rounds N] [--work DIR] [--s3-latency MS]
# Needs: COFFER_BIN (default target/release/coffer), RESTIC_BIN (default the pinned
# test binary ~/.cache/coffer-ci/bin/restic-v0.19.1), python3, /usr/bin/time.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
SIZE_MB=1024
ROUNDS=2
S3_LATENCY=
WORK=${COFFER_BENCH_WORK:-$BENCH_DIR/work/import}
COFFER_BIN=${COFFER_BIN:-$ROOT/target/release/coffer}
RESTIC_BIN=${RESTIC_BIN:-$HOME/.cache/coffer-ci/bin/restic-v0.19.1}
while [[ $# -gt 0 ]]; do
    case $1 in
        --size) SIZE_MB=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --s3-latency) S3_LATENCY=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ -x $COFFER_BIN ]] || { echo "no coffer binary at $COFFER_BIN: cargo build --release -p coffer" >&2; exit 1; }
[[ -x $RESTIC_BIN ]] || { echo "no restic at $RESTIC_BIN: bash .ci/services.sh install" >&2; exit 1; }

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
export RESTIC_PASSWORD=bench-restic COFFER_PASSWORD=bench-coffer
export RESTIC_CACHE_DIR=$WORK/restic-cache
RESTIC_REPO=$WORK/restic-repo
SRC=$WORK/src
SHM=/dev/shm/coffer-import-bench
mkdir -p "$WORK"

if [[ ! -f $WORK/ready-$SIZE_MB ]]; then
    rm -rf "$SRC" "$RESTIC_REPO" "$RESTIC_CACHE_DIR" "$WORK"/ready-*
    log "data: ~$SIZE_MB MiB from /usr/share /usr/lib"
    mkdir -p "$SRC"
    python3 "$BENCH_DIR/dataset.py" select "$SIZE_MB" /usr/share /usr/lib |
        (cd / && xargs -0 cp --parents -a -t "$SRC" 2>/dev/null || true)
    "$RESTIC_BIN" -r "$RESTIC_REPO" init --repository-version 2 >/dev/null
    "$RESTIC_BIN" -r "$RESTIC_REPO" backup -q --tag v1 "$SRC"
    python3 "$BENCH_DIR/dataset.py" mutate "$SRC" 42 >/dev/null
    "$RESTIC_BIN" -r "$RESTIC_REPO" backup -q --tag v2 "$SRC"
    python3 "$BENCH_DIR/dataset.py" mutate "$SRC" 43 >/dev/null
    "$RESTIC_BIN" -r "$RESTIC_REPO" backup -q --tag v3 "$SRC"
    touch "$WORK/ready-$SIZE_MB"
fi
mapfile -t SNAPS < <("$RESTIC_BIN" -r "$RESTIC_REPO" snapshots --json |
    python3 -c 'import json,sys; [print(s["id"]) for s in sorted(json.load(sys.stdin), key=lambda s: s["time"])]')
BYTES=$(du -sb "$SRC" | cut -f1)

if [[ -n $S3_LATENCY ]]; then
    export COFFER_CI_RUN=$WORK/services
    bash "$ROOT/.ci/services.sh" install >&2
    bash "$ROOT/.ci/services.sh" start >&2
    trap 'bash "$ROOT/.ci/services.sh" stop >&2 || true' EXIT
    # shellcheck disable=SC1091
    . "$COFFER_CI_RUN/env"
    # shellcheck source=lib/latency.sh
    . "$BENCH_DIR/lib/latency.sh"
    export AWS_ACCESS_KEY_ID=$COFFER_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$COFFER_TEST_S3_SECRET_KEY
    export AWS_DEFAULT_REGION=$COFFER_TEST_S3_REGION AWS_REGION=$COFFER_TEST_S3_REGION
    # The gateway keeps each object as a file under its bucket's directory: the same
    # repository, copied in place, is served by it.
    mkdir -p "$COFFER_CI_RUN/s3-data/$COFFER_TEST_S3_BUCKET/import-bench"
    cp -a "$RESTIC_REPO/." "$COFFER_CI_RUN/s3-data/$COFFER_TEST_S3_BUCKET/import-bench/"
    RESTIC_REPO=s3:$(proxy_for "$S3_LATENCY")/$COFFER_TEST_S3_BUCKET/import-bench
    export RESTIC_CACHE_DIR=$WORK/restic-cache-s3
    log "restic repository at $RESTIC_REPO ($S3_LATENCY ms round trip)"
fi
log "restic repository: ${#SNAPS[@]} snapshots of $BYTES bytes (last)"

restic_round() {
    local i out
    for i in 0 1 2; do
        rm -rf "$SHM"; mkdir -p "$SHM"
        out=$( { /usr/bin/time -f '%e %M' "$RESTIC_BIN" -r "$RESTIC_REPO" restore -q "${SNAPS[$i]}" --target "$SHM" >/dev/null; } 2>&1 | tail -1)
        echo "restic restore v$((i + 1)) $out"
    done
    rm -rf "$SHM"
}

# shellcheck source=lib/import.sh
. "$BENCH_DIR/lib/import.sh"
coffer_round() { coffer_import_round "restic:$RESTIC_REPO"; }

for r in $(seq 1 "$ROUNDS"); do
    if (( r % 2 )); then restic_round; coffer_round; else coffer_round; restic_round; fi | sed "s/^/round $r: /"
done
