#!/usr/bin/env python3
"""Turn bench/run.sh's raw CSV into the markdown report (medians, min/max, coffer / best peer)."""
import argparse
import csv
import os
import statistics
import sys

TOOLS = ["coffer", "restic", "rustic", "borg", "kopia"]
STEPS = [
    ("init", "init (empty repository)"),
    ("backup-v1", "first backup of v1"),
    ("backup-v1-unchanged", "backup of v1 again (unchanged)"),
    ("backup-v2", "backup of v2 (1% changed)"),
    ("restore", "full restore of latest (v2)"),
    ("check-read-data", "check reading all data"),
    ("backup-random", "first backup, incompressible set"),
]
SIZE_STEPS = {"init", "backup-v1", "backup-v1-unchanged", "backup-v2", "backup-random"}


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def fmt_num(v, unit):
    if v is None:
        return "-"
    if unit == "s":
        return "%.2f" % v if v < 10 else "%.1f" % v
    if unit == "MiB":
        return "%.1f" % v if v < 100 else "%.0f" % v
    return str(v)


def main():
    ap = argparse.ArgumentParser()
    for a in ("csv", "facts", "tools", "logs", "cmdline", "run-id", "elapsed", "repeat", "dataset", "borg-mode", "src", "out"):
        ap.add_argument("--" + a, required=True)
    args = ap.parse_args()

    with open(args.csv, newline="") as fh:
        rows = list(csv.DictReader(fh))
    avail = {}
    with open(args.tools) as fh:
        for line in fh:
            t, status = line.rstrip("\n").split("\t", 1)
            avail[t] = status
    tools = [t for t in TOOLS if t in avail]
    peers = [t for t in tools if t != "coffer"]

    by = {}
    for r in rows:
        by.setdefault((r["tool"], r["step"]), []).append(r)

    def cell_stats(tool, step, metric):
        """(median, min, max, n_ok, n_bad, statuses) for one metric over ok repetitions."""
        rs = by.get((tool, step), [])
        vals = []
        bad = []
        for r in rs:
            if r["status"] != "ok":
                bad.append(r["status"])
                continue
            if metric == "wall":
                v = num(r["wall_s"])
            elif metric == "cpu":
                u, s = num(r["user_s"]), num(r["sys_s"])
                v = None if u is None or s is None else u + s
            elif metric == "rss":
                v = num(r["max_rss_kb"])
                v = None if v is None else v / 1024.0
            elif metric == "size":
                v = num(r["repo_bytes"])
                v = None if v is None else v / 1048576.0
            if v is not None:
                vals.append(v)
        if not vals:
            return None, None, None, 0, bad
        return statistics.median(vals), min(vals), max(vals), len(vals), bad

    def table(metric, title, unit, steps, lower_is_better=True):
        out = ["### %s" % title, ""]
        out.append("| step | " + " | ".join(tools) + " | coffer / best peer |")
        out.append("| --- | " + " | ".join("---:" for _ in tools) + " | ---: |")
        for step, label in steps:
            cells = []
            med = {}
            for t in tools:
                if avail[t] != "ok":
                    cells.append("n/a")
                    continue
                m, lo, hi, n, bad = cell_stats(t, step, metric)
                if not by.get((t, step)):
                    cells.append("-")
                    continue
                if m is None:
                    cells.append("**%s**" % "/".join(sorted(set(bad))).upper() if bad else "-")
                    continue
                c = fmt_num(m, unit)
                if n > 1:
                    c += " [%s–%s]" % (fmt_num(lo, unit), fmt_num(hi, unit))
                if bad:
                    c += " (**%d %s**)" % (len(bad), "/".join(sorted(set(bad))).upper())
                cells.append(c)
                if not bad:
                    med[t] = m
            ratio = "-"
            peer_meds = {p: med[p] for p in peers if p in med}
            if "coffer" in med and peer_meds:
                best = min(peer_meds, key=peer_meds.get) if lower_is_better else max(peer_meds, key=peer_meds.get)
                if peer_meds[best] > 0:
                    ratio = "%.2f× (%s)" % (med["coffer"] / peer_meds[best], best)
                else:
                    ratio = "- (%s: 0)" % best
            out.append("| %s | %s | %s |" % (label, " | ".join(cells), ratio))
        out.append("")
        return out

    with open(args.facts) as fh:
        facts = fh.read().rstrip()

    md = []
    md.append("# coffer side-by-side benchmark: %s" % args.run_id)
    md.append("")
    md.append("Command: `%s`  " % args.cmdline)
    md.append("Measured wall time of the whole measurement loop: %d s; repetitions: %s (medians shown, [min–max] when more than one)." % (int(args.elapsed), args.repeat))
    md.append("")
    md.append("## Machine and tools")
    md.append("")
    md.append(facts)
    md.append("")
    md.append("## Setup")
    md.append("")
    md.append("- Data: %s." % args.dataset)
    md.append("- Every tool backs up the same absolute path (`%s`): a fresh `cp -a` of v1; the v2 edit is applied to it in place before the third backup, so change detection by mtime/size/inode works as in real use." % args.src)
    md.append("- Encryption on everywhere, each tool's default compression: coffer (default), restic/rustic (repository v2, compression `auto`), borg (`--encryption=%s`, lz4), kopia (filesystem repository, default policy: **no compression**)." % args.borg_mode)
    md.append("- check: coffer `check --read-data`, restic/rustic `check --read-data`, borg `check --verify-data`, kopia `snapshot verify --verify-files-percent=100`.")
    md.append("- Every restore is verified against a manifest of v2 (path, mode, size, sha256 of every file); a mismatch marks the step BAD-RESTORE.")
    md.append("- Warm page cache (the OS cache is not dropped); tools run in the same order in every repetition; `sync` before each step. Shared/noisy machine: compare ratios within one run, not absolute times across runs.")
    md.append("- CPU = user + sys seconds; peak RSS = `/usr/bin/time` %M (largest resident set of the process tree); repository size = `du -sb` after the step.")
    md.append("- coffer / best peer: coffer's median divided by the best (lowest) peer median for that step; < 1 means coffer is better.")
    md.append("")
    md.append("## Results")
    md.append("")
    md += table("wall", "Wall time (s)", "s", STEPS)
    md += table("cpu", "CPU time, user+sys (s)", "s", STEPS)
    md += table("rss", "Peak RSS (MiB)", "MiB", STEPS)
    md += table("size", "Repository size after the step (MiB)", "MiB", [s for s in STEPS if s[0] in SIZE_STEPS])

    notes = []
    for t in tools:
        if avail[t] != "ok":
            notes.append("- **%s**: %s" % (t, avail[t]))
    for r in rows:
        if r["status"] != "ok":
            line = "- **%s %s (repetition %s)**: %s, exit code %s" % (r["tool"], r["step"], r["rep"], r["status"].upper(), r["exit_code"])
            if r.get("note"):
                line += "; " + r["note"]
            notes.append(line)
            logf = os.path.join(args.logs, "%s-%s-%s.log" % (r["rep"], r["tool"], r["step"]))
            if os.path.exists(logf):
                with open(logf, errors="replace") as fh:
                    tail = fh.read().splitlines()[-12:]
                notes.append("")
                notes.append("  ```")
                notes += ["  " + l[:300] for l in tail]
                notes.append("  ```")
    verified = sorted({r["tool"] for r in rows if r["step"] == "restore" and r["status"] == "ok"})
    md.append("## Failures and notes")
    md.append("")
    if verified:
        md.append("- Restores verified identical to v2: %s." % ", ".join(verified))
    md += notes if notes else ["- No failed step."]
    md.append("")
    md.append("Raw measurements: `%s.csv` beside this file." % args.run_id)
    md.append("")

    with open(args.out, "w") as fh:
        fh.write("\n".join(md))


if __name__ == "__main__":
    main()
