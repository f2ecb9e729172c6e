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

    # Published rows (synthetic, in this temporary copy only). At one size: the derived rows of
    # their profile and operation stay, at the bandwidth that passes through the published
    # time, so the fitted profile predicts that time there and still scales with n and k.
    shutil.copy(os.path.join(root, "profiles", "sources", "a100-sxm4.csv"), s)
    v = os.path.join(tmp, "profiles", "sources", "v100-sxm2.csv")

    def with_rows(extra):
        shutil.copy(os.path.join(root, "profiles", "sources", "v100-sxm2.csv"), v)
        with open(v, "a") as f:
            for n, k, t in extra:
                f.write("v100-sxm2-torch,topk,%d,%d,0,float32,%g,published,NVIDIA V100 SXM2,"
                        "pytorch,test,https://example.invalid/test,a synthetic row of this test "
                        "only\n" % (n, k, t))
        for step in ("derive", "fit"):
            subprocess.run([sys.executable, script, step, "--root", tmp], check=True)
        with open(v, newline="") as f:
            mine = [r for r in csv.DictReader(f)
                    if r["profile"] == "v100-sxm2-torch" and r["op"] == "topk"]
        prof = open(os.path.join(tmp, "profiles", "v100-sxm2-torch.csv")).read()
        row = next(l for l in prof.splitlines() if l.startswith("topk,")).split(",")
        c = [float(x) for x in row[1:5]]
        return mine, prof, row, lambda n, k: c[0] + c[1] * n + c[2] * k

    mine, prof, row, t = with_rows([(1000000, 10000, 250)])
    pub = [r for r in mine if r["kind"] == "published"]
    der = [r for r in mine if r["kind"] == "derived"]
    expect(len(pub) == 1 and len(der) == 18 and all("calibrated" in r["notes"] for r in der),
           "one published size keeps the calibrated derived rows: %d, %d" % (len(pub), len(der)))
    expect(abs(t(1000000, 10000) - 250e-6) < 1e-9 * 250e-6 + 1e-12 and row[7] == "19",
           "the fit passes through the published row: %s" % ",".join(row))
    expect(t(10000000, 100000) > 5 * t(1000000, 10000), "the fit still scales with n")
    # At two sizes: the published rows alone.
    mine, prof, row, t = with_rows([(1000000, 10000, 250), (10000000, 100000, 1900)])
    expect(len(mine) == 2 and all(r["kind"] == "published" for r in mine),
           "two published sizes replace the derived rows: %d rows" % len(mine))
    expect(row[7] == "2" and "2 published" in prof,
           "the profile's topk is fitted to the published rows: " + ",".join(row))

print("ok" if not fails else "%d failure(s)" % fails)
sys.exit(1 if fails else 0)
