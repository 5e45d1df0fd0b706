#!/usr/bin/env bash
# Sequential read through `coffer mount` against `coffer restore` of the same
# snapshot (docs/performance.md#mount). Needs root and /dev/fuse.
# Usage: bash bench/mount_read.sh COFFER_BINARY SOURCE_DIR WORK_DIR [ROUNDS]
set -euo pipefail
B=$1 SRC=$2 W=$3 ROUNDS=${4:-3}
export COFFER_REPOSITORY=$W/repo COFFER_PASSWORD=bench
rm -rf "$W" && mkdir -p "$W/mnt"
"$B" -q init --kdf-log-n 10 --insecure-kdf
"$B" -q backup "$SRC"
for r in $(seq "$ROUNDS"); do
  rm -rf "$W/out"
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  /usr/bin/time -f "restore round $r: %e s, peak RSS %M KB" "$B" -q restore latest --target "$W/out"
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  "$B" -q mount "$W/mnt" & pid=$!
  until [ -e "$W/mnt/snapshots/latest" ]; do sleep 0.1; done
  snap=$W/mnt/snapshots/$(readlink "$W/mnt/snapshots/latest")
  # `tar cf /dev/null` would skip reading file contents (GNU tar): pipe through cat.
  /usr/bin/time -f "mount round $r: %e s" bash -c "tar -C '$snap' -cf - . | cat > /dev/null"
  kill -TERM $pid; wait $pid
done
rm -rf "$W/out"
