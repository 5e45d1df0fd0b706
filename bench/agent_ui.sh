#!/usr/bin/env bash
# bench/agent_ui.sh: the idle memory of `coffer agent` serving the UI (`[agent] ui`), against the
# plain agent with the same jobs, after the requests bench/ui.sh makes (the first page of the
# large directory twice, the dashboard and snapshot list three times, three downloads of the
# large file), 80 s later (docs/performance.md, "UI").
# Usage: bash bench/agent_ui.sh RUN_DIR [COFFER]   (RUN_DIR: a repository bench/ui.sh made)
set -euo pipefail
R=${1:?usage: bench/agent_ui.sh RUN_DIR [COFFER]}
BIN=${2:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target/release/coffer}
export HOME=$R/home XDG_CONFIG_HOME=$R/config XDG_STATE_HOME=$R/state-agentui COFFER_PASSWORD_FILE=$R/pass COFFER_REPOSITORY=$R/repo
mkdir -p $XDG_STATE_HOME
PORT=18347
{ printf '[agent]\nui = "127.0.0.1:%s"\n\n' $PORT; cat $R/jobs.toml; } > $R/jobs-ui.toml
anon_file() { awk '/^RssAnon:/ {a = $2} /^RssFile:/ {f = $2} END {printf "%d anon + %d file", a / 1024, f / 1024}' "/proc/$1/status"; }
rss() { awk '/^VmRSS:/ {print int($2/1024)}' /proc/$1/status; }
COFFER_JOBS=$R/jobs-ui.toml COFFER_AGENT_STATE=$XDG_STATE_HOME/agent-ui.sqlite $BIN agent 2>$R/agent-ui.err & AU=$!
COFFER_JOBS=$R/jobs.toml COFFER_AGENT_STATE=$XDG_STATE_HOME/agent.sqlite $BIN agent 2>$R/agent-plain.err & AP=$!
trap 'kill $AU $AP 2>/dev/null' EXIT
for _ in $(seq 1 300); do [[ -s $XDG_STATE_HOME/coffer/ui/login-token ]] && break; sleep 0.2; done
sleep 10
echo "after start: agent+ui $(rss $AU) MiB ($(anon_file $AU)), agent $(rss $AP) MiB ($(anon_file $AP))"
BASE=http://127.0.0.1:$PORT
curl -sf -c $R/jar-a -H 'Content-Type: application/json' -d "{\"secret\": \"$(cat $XDG_STATE_HOME/coffer/ui/login-token)\"}" $BASE/api/v1/login >/dev/null
NAME=$(curl -sf -b $R/jar-a $BASE/api/v1/repos | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["repositories"][0]["name"])')
SNAP=$(curl -sf -b $R/jar-a "$BASE/api/v1/repos/$NAME/snapshots?limit=2000" | python3 -c 'import json,sys
d=json.load(sys.stdin); s=d["snapshots"]
print([x["id"] for x in s if not x["hostname"].startswith("host")][0])')
REL=${R#/}/src
curl -sf -b $R/jar-a -o /dev/null "$BASE/api/v1/repos/$NAME/snapshots/$SNAP/entries?path=$REL/big&limit=1000"
curl -sf -b $R/jar-a -o /dev/null "$BASE/api/v1/repos/$NAME/snapshots/$SNAP/entries?path=$REL/big&offset=50000&limit=1000"
for i in 1 2 3; do curl -sf -b $R/jar-a -o /dev/null $BASE/; curl -sf -b $R/jar-a -o /dev/null $BASE/repos/$NAME; done
for i in 1 2 3; do curl -sf -b $R/jar-a -o /dev/null "$BASE/api/v1/repos/$NAME/snapshots/$SNAP/content?path=$REL/large.bin"; done
sleep 5
echo "after use: agent+ui $(rss $AU) MiB ($(anon_file $AU))"
sleep 80
echo "80 s later: agent+ui $(rss $AU) MiB ($(anon_file $AU)), agent $(rss $AP) MiB ($(anon_file $AP)); above: $(( $(rss $AU) - $(rss $AP) )) MiB"
awk '/^[0-9a-f]+-[0-9a-f]+ / {heap = ($NF == "[heap]")} /^Anonymous:/ {if (heap) h += $2; else o += $2} END {printf "agent+ui anonymous: %d MiB in [heap], %d MiB elsewhere\n", h / 1024, o / 1024}' /proc/$AU/smaps
