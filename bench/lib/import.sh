# bench/lib/import.sh: sourced by the import benchmarks (import_vs_restic.sh,
# import_vs_borg.sh, import_vs_kopia.sh). Needs WORK and COFFER_BIN set.

# coffer_import_round SOURCE: imports SOURCE (restic:…, borg:…, kopia:…) into a fresh
# coffer repository under WORK; prints each snapshot's time and what it read (from
# its summary), then the whole command's wall time and peak RSS.
coffer_import_round() {
    local repo=$WORK/coffer-repo out
    rm -rf "$repo" "$WORK/coffer-home"
    HOME=$WORK/coffer-home "$COFFER_BIN" --repo "$repo" -q init >/dev/null
    out=$( { HOME=$WORK/coffer-home /usr/bin/time -f 'TIME %e %M' "$COFFER_BIN" --repo "$repo" --json import "$1" >"$WORK/import.json"; } 2>&1 | grep '^TIME' | tail -1)
    python3 - "$WORK/import.json" <<'PY'
import json, sys
n = 0
for line in open(sys.argv[1]):
    v = json.loads(line)
    if v.get("type") == "imported":
        n += 1
        m = v["summary"]
        print(f"coffer import v{n} {m['duration_ms'] / 1000:.2f} read={m['bytes_read']} files_read={m['files_new']} known={m['files_unchanged']}")
PY
    echo "coffer import-all ${out#TIME }"
}
