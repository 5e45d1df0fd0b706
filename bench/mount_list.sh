#!/usr/bin/env bash
# Listing through `coffer mount`: first `ls -f` of a large directory and peak RSS
# of the mount process over `ls -lR` of the snapshot (docs/performance.md#mount).
# Usage: bash bench/mount_list.sh COFFER_BINARY SOURCE_DIR WORK_DIR
set -euo pipefail
B=$1 SRC=$2 W=$3
export COFFER_REPOSITORY=$W/repo COFFER_PASSWORD=bench
rm -rf "$W" && mkdir -p "$W/mnt"
"$B" -q init --kdf-log-n 10 --insecure-kdf
/usr/bin/time -f "backup: %e s, peak RSS %M KB" "$B" -q backup "$SRC"
/usr/bin/time -f "mount process: peak RSS %M KB" "$B" -q mount "$W/mnt" & pid=$!
until [ -e "$W/mnt/snapshots/latest" ]; do sleep 0.1; done
snap=$W/mnt/snapshots/$(readlink "$W/mnt/snapshots/latest")
# The last directory found (reading every name, so no pipe is cut short under pipefail).
dir=$(find "$SRC" -type d | tail -n 1)
/usr/bin/time -f "first ls -f of $dir: %e s" bash -c "ls -f '$snap$dir' | wc -l"
/usr/bin/time -f "ls -lR: %e s" bash -c "ls -lR '$snap' | wc -l"
kill -TERM $(pgrep -P $pid || echo $pid) 2>/dev/null || true
wait $pid || true
