#!/bin/bash
# A/B of two coffer builds on the harness data set (bench/run.sh builds it), alternating, three rounds.
# Usage: OLD=path/to/old/coffer [NEW=...] bash bench/ab.sh   (needs root only to drop the page cache)
set -e
D=${DATA:-$(dirname "$0")/work/data}
OLD=${OLD:?set OLD to the older coffer binary}
NEW=${NEW:-$(dirname "$0")/../target/release/coffer}
export COFFER_PASSWORD=pw
for round in 1 2 3; do
  for v in old new; do
    B=$OLD; [ $v = new ] && B=$NEW
    T=$(mktemp -d /tmp/ab.XXXX); export HOME=$T/home COFFER_REPOSITORY=$T/repo
    # Builds before --insecure-kdf existed refuse the flag.
    $B init -q --kdf-log-n 10 --insecure-kdf >/dev/null 2>&1 || $B init -q --kdf-log-n 10 >/dev/null
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    s=$(date +%s.%N); $B -q backup $D/v1 >/dev/null; e=$(date +%s.%N); first=$(echo "$e - $s" | bc)
    s=$(date +%s.%N); $B -q backup $D/v1 >/dev/null; e=$(date +%s.%N); unch=$(echo "$e - $s" | bc)
    s=$(date +%s.%N); $B -q backup $D/random >/dev/null; e=$(date +%s.%N); rnd=$(echo "$e - $s" | bc)
    s=$(date +%s.%N); $B -q restore latest --target $T/out >/dev/null; e=$(date +%s.%N); rst=$(echo "$e - $s" | bc)
    s=$(date +%s.%N); $B -q check --read-data >/dev/null; e=$(date +%s.%N); chk=$(echo "$e - $s" | bc)
    echo "$round $v first=$first unchanged=$unch random=$rnd restore=$rst check=$chk"
    rm -rf $T
  done
done
