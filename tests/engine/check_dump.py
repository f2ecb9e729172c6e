#!/usr/bin/env python3
"""check_dump.py - `deftsim run --dump` read back with numpy alone, as a user would.

Runs a tiny scenario through the deftsim executable (DEFTSIM_EXE), then loads every .npy
file of the dump and checks it against rows.csv and against what each sparsifier promises:
sorted int64 selections of local_count indices, a union of nnz indices with nnz float32
values, DEFT's disjoint selections whose union plus the common fragments is U, Top-k's U as
the union of the picks, gTop-k's U inside the picks, dense's U = every index.

With arguments DUMP_DIR ROWS_CSV it checks an existing dump instead of making one.
Needs numpy (the CI installs it); fails without it.
"""
import csv
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    sys.exit("check_dump.py: numpy is required (pip install numpy)")

MODEL = """index,name,shape,numel
0,conv.weight,16x3x3x3,432
1,conv.bias,16,16
2,fc1.weight,64x32,2048
3,fc1.bias,64,64
4,fc2.weight,10x64,640
5,fc2.bias,10,10
"""


def fail(msg):
    sys.exit(f"check_dump.py: {msg}")


def load_index(path, n):
    a = np.load(path)
    if a.dtype != np.dtype("<i8") or a.ndim != 1:
        fail(f"{path}: {a.dtype} {a.shape}, expected 1-D <i8")
    if a.size and (a[0] < 0 or a[-1] >= n):
        fail(f"{path}: index out of [0, {n})")
    if np.any(np.diff(a) <= 0):
        fail(f"{path}: not sorted ascending without duplicates")
    return a


def density_text(d):
    """The engine's shortest round-trip spelling of a density ('%.15g' .. '%.17g')."""
    for prec in (15, 16, 17):
        s = "%.*g" % (prec, d)
        if float(s) == d:
            return s
    return s


def check(dump, rows_csv):
    with open(rows_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        fail(f"{rows_csv}: no rows")
    # One entry per (method, density, P, iteration, worker): the worker-level columns.
    workers = {}
    for r in rows:
        key = (r["method"], r["density"], int(r["P"]), int(r["iteration"]), int(r["worker"]))
        workers.setdefault(key, r)
    iterations = sorted({k[:4] for k in workers})
    checked = 0
    for method, dens, P, it in iterations:
        d = os.path.join(dump, method, "d" + density_text(float(dens)), f"P{P}", f"it{it}")
        first = workers[(method, dens, P, it, 0)]
        n, nnz, common = int(first["n"]), int(first["nnz"]), int(first["common_count"])
        u = load_index(os.path.join(d, "union.npy"), n)
        v = np.load(os.path.join(d, "values.npy"))
        if u.size != nnz:
            fail(f"{d}: union has {u.size} indices, rows.csv says nnz = {nnz}")
        if v.dtype != np.dtype("<f4") or v.shape != u.shape:
            fail(f"{d}/values.npy: {v.dtype} {v.shape}, expected <f4 ({nnz},)")
        if not np.all(np.isfinite(v)):
            fail(f"{d}/values.npy: non-finite values")
        sel = []
        for w in range(P):
            s = load_index(os.path.join(d, f"worker{w}.npy"), n)
            want = int(workers[(method, dens, P, it, w)]["local_count"])
            if s.size != want:
                fail(f"{d}/worker{w}.npy: {s.size} indices, rows.csv says local_count = {want}")
            sel.append(s)
        picks = np.concatenate(sel) if sel else np.zeros(0, dtype="<i8")
        distinct = np.unique(picks)
        if method == "deft":
            if distinct.size != picks.size:
                fail(f"{d}: DEFT workers selected the same index twice")
            if u.size != picks.size + common:
                fail(f"{d}: |U| = {u.size}, picks {picks.size} + common {common}")
        if method in ("deft", "topk", "topk-ag", "cltk", "dgc") and not np.isin(picks, u).all():
            fail(f"{d}: a {method} pick is missing from the union")
        if method in ("micro", "exdyna") and (distinct.size != picks.size or
                                              not np.array_equal(distinct, u)):
            fail(f"{d}: {method}'s union is not the disjoint union of the workers' picks")
        if method == "topk" and not np.array_equal(distinct, u):
            fail(f"{d}: Top-k's union is not the union of the workers' picks")
        if method == "gtopk" and not np.isin(u, distinct).all():
            fail(f"{d}: gTop-k's final set holds an index no worker picked")
        if method == "dense" and not np.array_equal(u, np.arange(n)):
            fail(f"{d}: dense's union is not every index")
        checked += 1
    return checked


def main():
    if len(sys.argv) == 3:
        n = check(sys.argv[1], sys.argv[2])
        print(f"check_dump.py: {n} iterations checked")
        return
    exe = os.environ.get("DEFTSIM_EXE")
    if not exe:
        fail("DEFTSIM_EXE is not set (run through meson test)")
    with tempfile.TemporaryDirectory(prefix="deftsim-dump-") as tmp:
        model = os.path.join(tmp, "tiny.csv")
        with open(model, "w") as f:
            f.write(MODEL)
        ini = os.path.join(tmp, "tiny.ini")
        with open(ini, "w") as f:
            f.write(
                "[scenario]\nname = tiny\nseed = 3\niterations = 2\n"
                f"output = {tmp}/out\n"
                f"[gradients]\nmodel = {model}\n"
                "[sparsify]\nmethods = deft, topk, topk-ag, cltk, gtopk, dgc, dense, micro, exdyna\n"
                "densities = 0.05, 0.01\n"
                "[workers]\ncounts = 1..4, 3\n"
            )
        dump = os.path.join(tmp, "dump")
        r = subprocess.run([exe, "run", ini, "--dump", dump, "--quiet"], capture_output=True,
                           text=True)
        if r.returncode != 0:
            fail(f"deftsim run exited {r.returncode}: {r.stderr}")
        n = check(dump, os.path.join(tmp, "out", "rows.csv"))
        if n != 9 * 2 * 4 * 2:
            fail(f"{n} iterations checked, expected {9 * 2 * 4 * 2}")
        print(f"check_dump.py: {n} iterations checked")


if __name__ == "__main__":
    main()
