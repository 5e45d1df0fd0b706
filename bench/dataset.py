#!/usr/bin/env python3
"""Deterministic data-set helpers for bench/run.sh.

Sub-commands:
  select  SIZE_MB ROOT...      print (NUL-separated) the regular files to copy
  mutate  DIR [SEED]           apply the deterministic "1% changed" edit, in place
  manifest DIR                 print a sorted listing: type, mode bits, size, sha256, path

`select` orders every readable regular file under the given roots by the
SHA-1 of its path (a fixed, well-mixed order, so the set is not dominated by
one package directory) and takes files until the budget is reached.  On one
machine the result is always the same list.

`mutate` picks ~1% of the files with random.Random(SEED) (default 42) and
appends to a quarter of them, rewrites 4 KiB in the middle of a quarter,
deletes a quarter, and adds as many new files as a quarter.  The content it
writes comes from the same seeded generator, so applying it to two copies of
the same tree yields byte-identical trees.
"""
import hashlib
import os
import random
import stat
import sys

MAX_FILE = 256 * 1024 * 1024  # skip single files above this (keeps the mix realistic)


def cmd_select(size_mb, roots):
    budget = int(size_mb) * 1024 * 1024
    cands = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in filenames:
                p = os.path.join(dirpath, name)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE:
                    continue
                if not os.access(p, os.R_OK):
                    continue
                key = hashlib.sha1(p.encode("utf-8", "surrogateescape")).hexdigest()
                cands.append((key, p, st.st_size))
    cands.sort()
    total = 0
    out = sys.stdout.buffer
    n = 0
    for _, p, size in cands:
        if total >= budget:
            break
        if total + size > budget * 1.02 and size > 1024 * 1024:
            continue  # do not overshoot the budget with one large file
        out.write(p.encode("utf-8", "surrogateescape") + b"\0")
        total += size
        n += 1
    sys.stderr.write("selected %d files, %.1f MiB\n" % (n, total / 1048576))


def list_files(d):
    files = []
    for dirpath, dirnames, filenames in os.walk(d):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            if os.path.isfile(p) and not os.path.islink(p):
                files.append(os.path.relpath(p, d))
    files.sort()
    return files


def cmd_mutate(d, seed=42):
    rng = random.Random(int(seed))
    files = [f for f in list_files(d) if f != ".bench-root"]
    n = max(4, len(files) // 100)
    chosen = rng.sample(files, min(n, len(files)))
    q = max(1, (len(chosen) + 3) // 4)
    appended, modified, deleted = chosen[:q], chosen[q:2 * q], chosen[2 * q:3 * q]
    stats = {"append": 0, "modify": 0, "delete": 0, "new": 0}
    for f in appended:
        p = os.path.join(d, f)
        os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
        with open(p, "ab") as fh:
            fh.write(rng.randbytes(rng.randint(100, 64 * 1024)))
        stats["append"] += 1
    for f in modified:
        p = os.path.join(d, f)
        os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
        size = os.path.getsize(p)
        off = size // 2
        with open(p, "r+b") as fh:
            fh.seek(off)
            fh.write(rng.randbytes(4096))
        stats["modify"] += 1
    for f in deleted:
        os.unlink(os.path.join(d, f))
        stats["delete"] += 1
    dirs = sorted({os.path.dirname(f) for f in files})
    for i in range(q):
        sub = rng.choice(dirs)
        p = os.path.join(d, sub, "bench-new-%04d.bin" % i)
        with open(p, "wb") as fh:
            fh.write(rng.randbytes(rng.randint(1024, 1024 * 1024)))
        stats["new"] += 1
    sys.stderr.write("mutate %s: %d files, %s\n" % (d, len(files), stats))


def cmd_manifest(d):
    out = []
    for dirpath, dirnames, filenames in os.walk(d):
        dirnames.sort()
        for name in filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, d)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out.append("l %s -> %s" % (rel, os.readlink(p)))
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(p, "rb") as fh:
                    while True:
                        b = fh.read(1 << 20)
                        if not b:
                            break
                        h.update(b)
                out.append("f %o %d %s %s" % (stat.S_IMODE(st.st_mode), st.st_size, h.hexdigest(), rel))
            else:
                out.append("o %s" % rel)
    out.sort()
    sys.stdout.write("\n".join(out) + "\n")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cmd = sys.argv[1]
    if cmd == "select":
        cmd_select(sys.argv[2], sys.argv[3:])
    elif cmd == "mutate":
        cmd_mutate(sys.argv[2], *sys.argv[3:4])
    elif cmd == "manifest":
        cmd_manifest(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
