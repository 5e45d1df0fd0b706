#!/usr/bin/env bash
# bench/cores.sh: how busy a first backup keeps the cores (docs/performance.md, "Cores").
# Backs up DIR (default: the harness's incompressible set, bench/work/data/random, which
# bench/run.sh --data-only makes) into a fresh local repository with each build in turn,
# alternating which goes first, ROUNDS rounds, the page cache warm (one untimed read first).
# Prints per run: wall seconds, user and system CPU seconds, and cores busy = CPU / wall.
# Usage: OLD=path/to/coffer [NEW=path/to/coffer] bash bench/cores.sh [--dir DIR] [--rounds N]
set -euo pipefail
BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DIR=$BENCH_DIR/work/data/random
ROUNDS=3
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dir) DIR=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        *) echo "cores.sh: unknown option: $1" >&2; exit 2 ;;
    esac
done
NEW=${NEW:-$BENCH_DIR/../target/release/coffer}
[[ -d $DIR ]] || { echo "cores.sh: no data at $DIR (bash bench/run.sh --data-only makes it)" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "cores.sh: needs GNU time (/usr/bin/time)" >&2; exit 1; }
export COFFER_PASSWORD=bench-password
cat "$DIR"/* >/dev/null
echo "data: $DIR, $(du -sb "$DIR" | cut -f1) bytes; $(nproc) cores"
run() {
    local name=$1 bin=$2 t
    t=$(mktemp -d "${TMPDIR:-/tmp}/cores.XXXXXX")
    HOME=$t/home "$bin" --repo "$t/repo" init -q --kdf-log-n 10 --insecure-kdf >/dev/null
    HOME=$t/home /usr/bin/time -f "%e %U %S %M" -o "$t/time" "$bin" --repo "$t/repo" -q backup "$DIR" >/dev/null
    read -r wall user sys rss <"$t/time"
    printf '%s %s wall=%.2f user=%.2f sys=%.2f cores=%.2f peak_rss_kb=%s\n' "$round" "$name" "$wall" "$user" "$sys" \
        "$(echo "($user + $sys) / $wall" | bc -l)" "$rss"
    rm -rf "$t"
}
for ((round = 1; round <= ROUNDS; round++)); do
    if [[ -n ${OLD:-} ]] && ((round % 2 == 1)); then run old "$OLD"; fi
    run new "$NEW"
    if [[ -n ${OLD:-} ]] && ((round % 2 == 0)); then run old "$OLD"; fi
done
