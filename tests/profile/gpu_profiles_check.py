#!/usr/bin/env python3
"""gpu_profiles_check.py - the sourced GPU profiles are what scripts/gpu_profiles.py fits from
profiles/sources (no coefficient without a source row), every source row names its address,
kind and notes, and the check fails when a profile or a source row is changed by hand."""
import csv
import os
import shutil
import subprocess
import sys
import tempfile

root = os.environ.get("DEFTSIM_SOURCE_ROOT") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
script = os.path.join(root, "scripts", "gpu_profiles.py")


def check(r):
    p = subprocess.run([sys.executable, script, "check", "--root", r], capture_output=True,
                       text=True)
    return p.returncode, p.stdout + p.stderr


fails = 0


def expect(cond, what):
    global fails
    if not cond:
        print("FAIL:", what)
        fails += 1


rc, out = check(root)
expect(rc == 0, "the shipped profiles and sources differ from the script's output:\n" + out)

srcdir = os.path.join(root, "profiles", "sources")
for name in sorted(os.listdir(srcdir)):
    with open(os.path.join(srcdir, name), newline="") as f:
        for i, row in enumerate(csv.DictReader(f), start=2):
            where = "%s:%d" % (name, i)
            expect(row["url"].startswith("https://"), where + ": url")
            expect(row["kind"] in ("published", "derived"), where + ": kind")
            expect(len(row["notes"]) > 20, where + ": notes")
            expect(float(row["time_us"]) > 0, where + ": time_us")
            if row["kind"] == "derived":
                expect("fraction" in row["notes"] and "per " in row["notes"],
                       where + ": a derived row states its fraction and overheads")

with tempfile.TemporaryDirectory() as tmp:
    shutil.copytree(os.path.join(root, "profiles"), os.path.join(tmp, "profiles"))
    # A coefficient edited by hand.
    p = os.path.join(tmp, "profiles", "v100-sxm2-torch.csv")
    text = open(p).read()
    line = next(l for l in text.splitlines() if l.startswith("topk,"))
    f = line.split(",")
    f[2] = repr(float(f[2]) * 0.5)
    open(p, "w").write(text.replace(line, ",".join(f)))
    rc, out = check(tmp)
    expect(rc == 1 and "v100-sxm2-torch.csv" in out, "an edited coefficient passes: " + out)
    shutil.copy(os.path.join(root, "profiles", "v100-sxm2-torch.csv"), p)
    # A source row's time edited by hand.
    s = os.path.join(tmp, "profiles", "sources", "a100-sxm4.csv")
    rows = open(s).read().splitlines()
    f = next(i for i, l in enumerate(rows) if l.startswith("a100-sxm4-best,topk,"))
    cells = rows[f].split(",")
    cells[6] = repr(float(cells[6]) * 2)
    rows[f] = ",".join(cells)
    open(s, "w").write("\n".join(rows) + "\n")
    rc, out = check(tmp)
    expect(rc == 1 and "a100-sxm4.csv" in out, "an edited source row passes: " + out)

    # A published row replaces the derived rows of its profile and operation (a synthetic row,
    # in this temporary copy only).
    shutil.copy(os.path.join(root, "profiles", "sources", "a100-sxm4.csv"), s)
    shutil.copy(os.path.join(root, "profiles", "sources", "v100-sxm2.csv"),
                os.path.join(tmp, "profiles", "sources", "v100-sxm2.csv"))
    v = os.path.join(tmp, "profiles", "sources", "v100-sxm2.csv")
    with open(v, "a") as f:
        f.write("v100-sxm2-torch,topk,1000000,10000,0,float32,250,published,NVIDIA V100 SXM2,"
                "pytorch,test,https://example.invalid/test,a synthetic row of this test only\n")
    for step in ("derive", "fit"):
        subprocess.run([sys.executable, script, step, "--root", tmp], check=True)
    with open(v, newline="") as f:
        mine = [r for r in csv.DictReader(f)
                if r["profile"] == "v100-sxm2-torch" and r["op"] == "topk"]
    expect(len(mine) == 1 and mine[0]["kind"] == "published",
           "derive keeps the published row alone: %d rows" % len(mine))
    prof = open(os.path.join(tmp, "profiles", "v100-sxm2-torch.csv")).read()
    row = next(l for l in prof.splitlines() if l.startswith("topk,"))
    expect(row.split(",")[7] == "1" and "1 published" in prof,
           "the profile's topk is fitted to the published row: " + row)

print("ok" if not fails else "%d failure(s)" % fails)
sys.exit(1 if fails else 0)
