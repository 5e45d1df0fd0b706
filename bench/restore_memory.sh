#!/bin/bash
# Restore memory against the number of files: 20 000 and 200 000 small files (100-4000 random
# bytes each, 1000 to a directory) are backed up once, then restored by two coffer binaries,
# alternating, three rounds, each restore into a freshly made ext4 file system (a loop-mounted
# image: restoring right after deleting an earlier restore makes ext4 skip recently freed inodes
# and costs more than the restore itself). Every restore is compared with its source: contents
# (diff -r) and each entry's kind, size, mode and mtime (directories' too).
# Prints wall time and peak RSS. Needs root (mount). Usage:
#   bash bench/restore_memory.sh OLD_BINARY NEW_BINARY
set -eu
OLD=$(realpath "$1"); NEW=$(realpath "$2")
W=$(mktemp -d /tmp/restore-memory.XXXX)
cd "$W"
export COFFER_PASSWORD=pw COFFER_REPOSITORY=$W/repo XDG_STATE_HOME=$W/state
cat > gen.py <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(n)
for i in range(n):
    d = os.path.join(root, f"g{i // 10000:02d}", f"d{i // 1000:03d}")
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}"), "wb") as f:
        f.write(rng.randbytes(rng.randint(100, 4000)))
PY
manifest() { (cd "$1" && find . -mindepth 1 \( -type d -printf '%p d %m %T@\n' \) -o -printf '%p %y %s %m %T@\n' | sort); }
"$NEW" init -q --kdf-log-n 10 --insecure-kdf >/dev/null
for n in 20000 200000; do
  python3 gen.py "$W/data-$n" $n
  "$NEW" -q backup "$W/data-$n"
  manifest "$W/data-$n" > "manifest-$n"
done
truncate -s 12G fs.img
mkdir mnt
fresh() {
  if mountpoint -q mnt; then umount mnt; fi
  mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 fs.img
  mount -o loop fs.img mnt
}
for round in 1 2 3; do
  if [ $((round % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for n in 20000 200000; do
    for which in $order; do
      if [ "$which" = old ]; then b=$OLD; else b=$NEW; fi
      fresh
      r=$( { /usr/bin/time -f "%e s %M KiB" "$b" -q restore "latest:$W/data-$n" --path "$W/data-$n" \
        --target mnt/out >/dev/null; } 2>&1 )
      manifest mnt/out | cmp -s - "manifest-$n" || { echo "metadata differs ($which, $n files)"; exit 1; }
      diff -r -q "$W/data-$n" mnt/out >/dev/null || { echo "content differs ($which, $n files)"; exit 1; }
      echo "round $round files=$n $which: $r"
    done
  done
done
umount mnt
cd /; rm -rf "$W"
