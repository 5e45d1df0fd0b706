#!/bin/bash
# Whole backups against an index already holding N blobs: the same first backup of the harness
# tree (bench/run.sh builds it) into repositories whose index was prefilled with 10^5 and 10^7
# made-up blob records (crates/coffer-core/examples/prefill_index.rs), alternating, three rounds.
# Prints wall time, peak RSS and the time an unchanged backup takes (index loading included).
# Usage: bash bench/index_scale.sh [N...]   (default: 100000 10000000)
set -e
cd "$(dirname "$0")/.."
D=${DATA:-bench/work/data}
SIZES=${*:-100000 10000000}
cargo build --release --locked -p coffer -q
cargo build --release --locked -p coffer-core --example prefill_index -q
B=$PWD/target/release/coffer
P=$PWD/target/release/examples/prefill_index
export COFFER_PASSWORD=pw
W=$(mktemp -d /tmp/index-scale.XXXX)
for n in $SIZES; do
  $B --repo $W/base-$n init -q --kdf-log-n 10 --insecure-kdf >/dev/null
  $P $W/base-$n $n
done
for round in 1 2 3; do
  for n in $SIZES; do
    rm -rf $W/r $W/home; cp -a $W/base-$n $W/r; export HOME=$W/home
    first=$( { /usr/bin/time -f "%e %M" $B --repo $W/r -q backup $D/v1 >/dev/null; } 2>&1 | tail -1)
    unch=$( { /usr/bin/time -f "%e %M" $B --repo $W/r -q backup $D/v1 >/dev/null; } 2>&1 | tail -1)
    echo "round $round blobs=$n first_backup(s,KiB)=[$first] unchanged_backup(s,KiB)=[$unch]"
  done
done
rm -rf $W
