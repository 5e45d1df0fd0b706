#!/usr/bin/env bash
# bench/s3.sh: coffer, restic and rustic side by side on a real S3 server (the Versity
# gateway of .ci/services.sh) reached through a toxiproxy proxy that adds round-trip latency.
# See bench/README.md ("Object storage over latency").  Usage:
#   bash bench/s3.sh [--latency 0,20,50] [--size MB] [--tools coffer,restic,rustic]
#                    [--coffer PATH] [--work DIR] [--cache DIR] [--step-timeout SECONDS]
#                    [--repeat N]
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$BENCH_DIR/.." && pwd)"
CMDLINE="bash bench/s3.sh $*"

LATENCIES=0,20,50
SIZE_MB=100
TOOLS=coffer,restic,rustic
CACHE=${COFFER_BENCH_CACHE:-$HOME/.cache/coffer-bench}
WORK=${COFFER_BENCH_WORK:-$BENCH_DIR/work}
COFFER_BIN=${COFFER_BIN:-$ROOT/target/release/coffer}
STEP_TIMEOUT=3600
REPEAT=1

usage() { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --latency) LATENCIES=$2; shift 2 ;;
        --size) SIZE_MB=$2; shift 2 ;;
        --tools) TOOLS=$2; shift 2 ;;
        --coffer) COFFER_BIN=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --cache) CACHE=$2; shift 2 ;;
        --step-timeout) STEP_TIMEOUT=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "s3.sh: unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "s3.sh: $*"; exit 1; }

# ---- binaries, data and servers --------------------------------------------------------
declare -A BIN=()
IFS=, read -r -a TOOL_LIST <<<"$TOOLS"
for t in "${TOOL_LIST[@]}"; do
    case "$t" in
        coffer) [[ -x $COFFER_BIN ]] || die "no coffer binary at $COFFER_BIN (cargo build --release -p coffer)"
                BIN[coffer]=$COFFER_BIN ;;
        restic) BIN[restic]=$CACHE/restic ;;
        rustic) BIN[rustic]=$CACHE/rustic/bin/rustic ;;
        *) die "unknown tool $t (coffer, restic, rustic)" ;;
    esac
    [[ -x ${BIN[$t]} ]] || die "$t is not installed at ${BIN[$t]}: run bash bench/run.sh --install-only --tools $t"
done

log "data: ~$SIZE_MB MiB tree and its 1%-changed version (bench/run.sh --data-only)"
bash "$BENCH_DIR/run.sh" --data-only --size "$SIZE_MB" --random-mb 1 --work "$WORK" --tools coffer >&2
V1=$WORK/data/v1 V2_MANIFEST=$WORK/data/v2.manifest SRC=$WORK/src

RUN_ID=s3-$(date +%Y-%m-%dT%H%M)
RUN_DIR=$WORK/runs/$RUN_ID
mkdir -p "$RUN_DIR/logs"
export COFFER_CI_RUN=$RUN_DIR/services
bash "$ROOT/.ci/services.sh" install >&2
bash "$ROOT/.ci/services.sh" start >&2
trap 'bash "$ROOT/.ci/services.sh" stop >&2 || true' EXIT
# shellcheck disable=SC1091
. "$COFFER_CI_RUN/env"
SERVER_LOG=$COFFER_CI_RUN/versitygw.log
export AWS_ACCESS_KEY_ID=$COFFER_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$COFFER_TEST_S3_SECRET_KEY
export AWS_DEFAULT_REGION=$COFFER_TEST_S3_REGION AWS_REGION=$COFFER_TEST_S3_REGION
export COFFER_PASSWORD=bench-password RESTIC_PASSWORD=bench-password RUSTIC_PASSWORD=bench-password

# ---- the latency proxy -------------------------------------------------------------------
# shellcheck source=lib/latency.sh
. "$BENCH_DIR/lib/latency.sh"

# ---- steps -------------------------------------------------------------------------------
CSV=$RUN_DIR/raw.csv
echo "rep,latency_ms,tool,step,status,wall_s,cpu_s,rss_kib,get,list,head,put,delete,post" >"$CSV"

# requests LINE_FROM: counts by kind of the server's log lines after LINE_FROM.  A GET of the
# bucket itself (no object path) is a LIST.
requests() {
    tail -n +"$(($1 + 1))" "$SERVER_LOG" | awk -F'|' -v bucket="/$COFFER_TEST_S3_BUCKET" '
        NF >= 7 {
            m = $6; gsub(/ /, "", m); p = $7; gsub(/ /, "", p); sub(/\?.*/, "", p)
            if (m == "GET" && (p == bucket || p == bucket "/")) m = "LIST"
            n[m]++
        }
        END { printf "%d,%d,%d,%d,%d,%d\n", n["GET"], n["LIST"], n["HEAD"], n["PUT"], n["DELETE"], n["POST"] }'
}

# step LAT TOOL NAME CMD...: runs and records one step.
step() {
    local lat=$1 tool=$2 name=$3; shift 3
    local logf=$RUN_DIR/logs/$lat-$tool-$name.log tf=$RUN_DIR/time.out before rc status=ok
    local wall=NA user=0 sys=0 rss=NA
    before=$(wc -l <"$SERVER_LOG")
    { printf '# cmd:'; printf ' %q' "$@"; printf '\n'; } >"$logf"
    set +e
    /usr/bin/time -f '%e %U %S %M' -o "$tf" timeout --kill-after=30 "$STEP_TIMEOUT" "$@" >>"$logf" 2>&1 </dev/null
    rc=$?
    set -e
    [[ -s $tf ]] && read -r wall user sys rss < <(tail -n1 "$tf")
    [[ $rc == 0 ]] || status=fail
    sleep 0.2 # the server writes its log line after answering
    local req; req=$(requests "$before")
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$REP" "$lat" "$tool" "$name" "$status" "$wall" \
        "$(echo "$user + $sys" | bc)" "$rss" "$req" >>"$CSV"
    log "  [$REP] $lat ms $tool $name: $status wall ${wall}s rss ${rss}KiB requests get,list,head,put,delete,post=$req"
    [[ $status == ok ]] || tail -n 5 "$logf" | sed 's/^/    | /' >&2
}

# tool_cmd TOOL ACTION [ARG]: sets CMD for the repository in REPO_URL (state in STATE).
tool_cmd() {
    local b=${BIN[$1]} st=$STATE/$1
    case "$1:$2" in
        coffer:*) CMD=(env XDG_CACHE_HOME="$st/cache" XDG_STATE_HOME="$st/state" "$b" --repo "s3:$ENDPOINT/$BUCKET/$PREFIX" --quiet) ;;
        restic:*) CMD=("$b" -r "s3:$ENDPOINT/$BUCKET/$PREFIX" --cache-dir "$st/cache" -q) ;;
        rustic:*) CMD=(env XDG_CONFIG_HOME="$st/config" "$b" -P bench --cache-dir "$st/cache" --no-progress) ;;
    esac
    case "$1:$2" in
        *:init) CMD+=(init) ;;
        *:backup) CMD+=(backup "$3") ;;
        rustic:restore) CMD+=(restore latest "$3") ;;
        *:restore) CMD+=(restore latest --target "$3") ;;
        *:check) CMD+=(check --read-data) ;;
    esac
}

run_tool() { # LAT TOOL
    local lat=$1 tool=$2 target
    PREFIX=$RUN_ID-$tool-$lat-$REP STATE=$RUN_DIR/state
    rm -rf "${STATE:?}/$tool" "$SRC"; mkdir -p "$STATE/$tool/config/rustic"
    if [[ $tool == rustic ]]; then
        cat >"$STATE/$tool/config/rustic/bench.toml" <<EOF
[repository]
repository = "opendal:s3"
password = "bench-password"

[repository.options]
bucket = "$BUCKET"
root = "/$PREFIX"
endpoint = "$ENDPOINT"
region = "$AWS_REGION"
access_key_id = "$AWS_ACCESS_KEY_ID"
secret_access_key = "$AWS_SECRET_ACCESS_KEY"
EOF
    fi
    cp -a "$V1" "$SRC"
    tool_cmd "$tool" init; step "$lat" "$tool" init "${CMD[@]}"
    tool_cmd "$tool" backup "$SRC"; step "$lat" "$tool" backup-v1 "${CMD[@]}"
    tool_cmd "$tool" backup "$SRC"; step "$lat" "$tool" backup-v1-unchanged "${CMD[@]}"
    python3 "$BENCH_DIR/dataset.py" mutate "$SRC" 42 2>/dev/null
    tool_cmd "$tool" backup "$SRC"; step "$lat" "$tool" backup-v2 "${CMD[@]}"
    target=$RUN_DIR/restore-$tool; rm -rf "$target"; mkdir -p "$target"
    tool_cmd "$tool" restore "$target"; step "$lat" "$tool" restore "${CMD[@]}"
    local marker; marker=$(find "$target" -name .bench-root -type f -print -quit)
    if [[ -z $marker ]] || ! cmp -s "$V2_MANIFEST" <(python3 "$BENCH_DIR/dataset.py" manifest "$(dirname "$marker")"); then
        log "  $tool restore at $lat ms: BAD RESTORE (differs from the v2 manifest)"
        sed -i "\$s/,ok,/,bad-restore,/" "$CSV"
    fi
    rm -rf "$target"
    tool_cmd "$tool" check; step "$lat" "$tool" check-read-data "${CMD[@]}"
    rm -rf "${STATE:?}/$tool" "$SRC"
}

BUCKET=$COFFER_TEST_S3_BUCKET
IFS=, read -r -a LAT_LIST <<<"$LATENCIES"
log "run $RUN_ID: latencies ${LAT_LIST[*]} ms, tools ${TOOL_LIST[*]}, $REPEAT round(s), load $(cut -d' ' -f1-3 /proc/loadavg)"
for lat in "${LAT_LIST[@]}"; do
    ENDPOINT=$(proxy_for "$lat")
    # Rounds of every tool in turn, so that a slower spell of the machine falls on all of them.
    for REP in $(seq "$REPEAT"); do
        for tool in "${TOOL_LIST[@]}"; do run_tool "$lat" "$tool"; done
    done
done

OUT=$BENCH_DIR/results/$RUN_ID-$(hostname -s 2>/dev/null || hostname)
cp "$CSV" "$OUT.csv"
python3 - "$CSV" "$CMDLINE" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" >"$OUT.md" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
reps = sorted({int(r["rep"]) for r in rows})
print(f"# coffer, restic, rustic on S3 through a latency proxy\n\n`{sys.argv[2]}` on {sys.argv[3]} cores, "
      f"load at the end {sys.argv[4]}. Wall seconds, CPU seconds, peak RSS MiB and server requests "
      "(GET/LIST/HEAD/PUT/DELETE/POST) per step; ratio = coffer / the faster peer."
      + (f" Medians of {len(reps)} rounds (requests: the first round's); the ratio is that of the medians, "
         "with the range of the rounds' own ratios." if len(reps) > 1 else "") + "\n")
steps = ["init", "backup-v1", "backup-v1-unchanged", "backup-v2", "restore", "check-read-data"]
tools = sorted({r["tool"] for r in rows}, key=["coffer", "restic", "rustic"].index)
def ok(r):
    return r["status"] == "ok" and r["wall_s"] != "NA"
def ratio(walls):
    peers = [w for t, w in walls.items() if t != "coffer"]
    return walls["coffer"] / min(peers) if "coffer" in walls and peers and min(peers) > 0 else None
for lat in sorted({int(r["latency_ms"]) for r in rows}):
    print(f"\n## {lat} ms round trip\n")
    print("| step | " + " | ".join(f"{t} wall / cpu / MiB / requests" for t in tools) + " | ratio |")
    print("|---|" + "---|" * (len(tools) + 1))
    for s in steps:
        cells, walls = [], {}
        for t in tools:
            rs = [r for r in rows if r["tool"] == t and r["step"] == s and int(r["latency_ms"]) == lat]
            if not rs:
                cells.append("-"); continue
            good = [r for r in rs if ok(r)]
            bad = sorted({r["status"] for r in rs if r["status"] != "ok"})
            req = "/".join(rs[0][k] for k in ["get", "list", "head", "put", "delete", "post"])
            if good:
                med = lambda k: statistics.median(float(r[k]) for r in good)
                rss = [int(r["rss_kib"]) for r in good if r["rss_kib"] not in ("", "NA")]
                rss = f"{statistics.median(rss) / 1024:.0f}" if rss else "NA"
                cells.append(f"{med('wall_s'):.2f} / {med('cpu_s'):.1f} / {rss} / {req}")
                walls[t] = med("wall_s")
            else:
                cells.append("NA")
            if bad:
                cells[-1] += " **" + ",".join(bad) + "**"
        r = ratio(walls)
        cell = f"{r:.2f}" if r is not None else "-"
        if len(reps) > 1:
            each = [ratio({row["tool"]: float(row["wall_s"]) for row in rows if row["step"] == s
                           and int(row["latency_ms"]) == lat and int(row["rep"]) == k and ok(row)}) for k in reps]
            each = [x for x in each if x is not None]
            if each:
                cell += f" ({min(each):.2f}-{max(each):.2f})"
        print(f"| {s} | " + " | ".join(cells) + f" | {cell} |")
EOF
log "results: $OUT.md and $OUT.csv"
