#!/bin/bash
# The storage requests of coffer's commands against the S3 test server, with and without the
# local cache (docs/performance.md#local-cache). Start the servers first (.ci/services.sh start;
# COFFER_CI_RUN names their directory), then:
#   COFFER=target/release/coffer bash bench/cache_requests.sh DATA_DIR
set -e
DATA=${1:?usage: bench/cache_requests.sh DATA_DIR}
RUN=${COFFER_CI_RUN:-/tmp/coffer-ci}
. "$RUN/env"
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
export AWS_ACCESS_KEY_ID=$COFFER_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$COFFER_TEST_S3_SECRET_KEY
export AWS_REGION=$COFFER_TEST_S3_REGION
export COFFER_PASSWORD=bench XDG_CACHE_HOME=$SCRATCH/cache XDG_STATE_HOME=$SCRATCH/state
B=${COFFER:-target/debug/coffer}
R="s3:$COFFER_TEST_S3_ENDPOINT/$COFFER_TEST_S3_BUCKET/cache-requests-$(date +%s)"
$B -r "$R" init --kdf-log-n 10 --insecure-kdf >/dev/null
run() { # label, arguments...
  local label=$1; shift
  local t0 t1 line
  t0=$(date +%s.%N)
  line=$($B -r "$R" --json -v "$@" 2>&1 >/dev/null | grep '"type":"storage"')
  t1=$(date +%s.%N)
  python3 -c '
import json, sys
d = json.loads(sys.argv[2]); r = d["requests"]; c = d.get("cache") or {}
print("%-34s GET %4d  LIST %3d  HEAD %3d  PUT %4d  down %9d  up %9d  hits %4s  %.2fs" % (
    sys.argv[1], r["get"], r["list"], r["head"], r["put"], r["bytes_down"], r["bytes_up"],
    c.get("hits", "-"), float(sys.argv[4]) - float(sys.argv[3])))' "$label" "$line" "$t0" "$t1"
}
run "backup (first, cache filled)" backup "$DATA"
run "backup unchanged --no-cache" --no-cache backup "$DATA"
run "backup unchanged, warm cache" backup "$DATA"
run "snapshots --no-cache" --no-cache snapshots
run "snapshots, warm cache" snapshots
run "ls latest --no-cache" --no-cache ls latest
run "ls latest, warm cache" ls latest
rm -rf "$SCRATCH/cache"
run "backup unchanged, cache deleted" backup "$DATA"
run "backup unchanged, warm again" backup "$DATA"
du -sh "$SCRATCH"/cache/coffer/*
