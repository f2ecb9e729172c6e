#!/usr/bin/env python3
"""lags_reference.py - deftsim's LAGS against a numpy reference written from the paper (Shi et
al., "Layer-wise Adaptive Gradient Sparsification for Distributed Deep Learning with Convergence
Guarantees", 2019: per layer a_l = residual_l + g_l, TopK(a_l, k_l), residual_l = a_l - TopK,
the update the mean of the P workers' sparse layers) with the uniform choice k_l =
max(1, floor(density * numel_l)), on a small trace over several iterations.

Exact, iteration by iteration: every worker's picks (--dump worker<w>.npy), the aggregate's
indices and values (union.npy, values.npy: the sum over workers in worker order, then / P),
and so the residuals through the following iterations; the rows' per-layer allgathers
(`layer`, bytes) and the iteration's `layers`, `layer_count_min` and `layer_count_max`. Ties rank as deftsim's kernels do (larger magnitude first,
then the lower index). Needs numpy (fails without it); run by meson (suite fast) with
DEFTSIM_EXE set."""
import csv
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    sys.exit("lags_reference: FAIL: numpy is required (pip install numpy)")

EXE = os.environ.get("DEFTSIM_EXE")
if not EXE:
    sys.exit("lags_reference: FAIL: DEFTSIM_EXE is not set (run through meson test)")

MODEL_CSV = """index,name,shape,numel
0,conv.weight,12x3x2x2,144
1,conv.bias,12,12
2,fc.weight,30x24,720
3,fc.bias,30,30
4,out.weight,5x40,200
"""
SHAPES = [(12, 3, 2, 2), (12,), (30, 24), (30,), (5, 40)]
OFFS = np.cumsum([0] + [math.prod(s) for s in SHAPES])
N = int(OFFS[-1])
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}", flush=True)


def run(*args):
    r = subprocess.run([EXE, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"lags_reference: FAIL: deftsim {' '.join(args)} exited {r.returncode}"
                         f"\n{r.stdout}\n{r.stderr}")
    return r


def k_of(d, n):
    return min(n, max(1, math.floor(d * n)))


def topk(x, k):
    order = np.lexsort((np.arange(len(x)), -np.abs(x.astype(np.float64))))
    return np.sort(order[:k])


def main():
    tmp = tempfile.mkdtemp(prefix="lags_ref_")
    model = os.path.join(tmp, "model.csv")
    with open(model, "w") as f:
        f.write(MODEL_CSV)
    T = 4
    for ci, (P, d) in enumerate([(3, 0.05), (4, 0.01), (2, 0.3)]):
        trace = os.path.join(tmp, f"trace{ci}")
        run("trace", "gen", "--model", model, "--workers", str(P), "--iterations", str(T),
            "--seed", str(500 + ci), "-o", trace)
        grads = [[np.array(run("trace", "dump", trace, "--iteration", str(t), "--worker", str(w))
                           .stdout.split(), dtype=np.float32) for w in range(P)]
                 for t in range(T)]
        ini = os.path.join(tmp, f"c{ci}.ini")
        with open(ini, "w") as f:
            f.write(f"[scenario]\nname = c{ci}\niterations = {T}\nseed = 1\n"
                    f"[gradients]\nsource = trace\ntrace = {trace}\n"
                    f"[sparsify]\nmethods = lags\ndensities = {d}\n"
                    f"[workers]\ncounts = {P}\n[network]\ncompute = none\n")
        out, dump = os.path.join(tmp, f"out{ci}"), os.path.join(tmp, f"dump{ci}")
        run("run", ini, "-q", "-o", out, "--dump", dump)
        rows = list(csv.DictReader(open(os.path.join(out, "rows.csv"))))
        ks = [k_of(d, int(OFFS[l + 1] - OFFS[l])) for l in range(len(SHAPES))]
        res = [np.zeros(N, np.float32) for _ in range(P)]
        dens = os.listdir(os.path.join(dump, "lags"))[0]
        for t in range(T):
            acc = [res[w] + grads[t][w] for w in range(P)]
            picks = []
            for w in range(P):
                idx = np.concatenate([OFFS[l] + topk(acc[w][OFFS[l]:OFFS[l + 1]], ks[l])
                                      for l in range(len(SHAPES))])
                picks.append(np.sort(idx))
            u = np.unique(np.concatenate(picks))
            s = np.zeros(N, np.float32)
            for w in range(P):
                s[picks[w]] += acc[w][picks[w]]
            vals = s[u] * np.float32(1.0 / P) if P & (P - 1) == 0 else s[u] / np.float32(P)
            for w in range(P):
                res[w] = acc[w].copy()
                res[w][picks[w]] = 0
            dd = os.path.join(dump, "lags", dens, f"P{P}", f"it{t}")
            for w in range(P):
                got = np.load(os.path.join(dd, f"worker{w}.npy"))
                check(np.array_equal(got, picks[w]), f"case {ci} t={t} worker {w}: picks")
            check(np.array_equal(np.load(os.path.join(dd, "union.npy")), u),
                  f"case {ci} t={t}: union")
            got = np.load(os.path.join(dd, "values.npy"))
            check(got.shape == vals.shape and np.array_equal(got, vals),
                  f"case {ci} t={t}: values differ in "
                  f"{int(np.sum(got != vals)) if got.shape == vals.shape else 'shape'}")
            ag = [r for r in rows if int(r["iteration"]) == t and r["worker"] == "0"
                  and r["phase_kind"] == "allgather"]
            check([int(r["layer"]) for r in ag] == list(range(len(SHAPES) - 1, -1, -1)),
                  f"case {ci} t={t}: allgathers by layer {[r['layer'] for r in ag]}")
            it = [r for r in rows if int(r["iteration"]) == t]
            for col, want in (("layers", len(SHAPES)), ("layer_count_min", min(ks)),
                              ("layer_count_max", max(ks))):
                check(all(r[col] and float(r[col]) == want for r in it),
                      f"case {ci} t={t}: {col} {sorted({r[col] for r in it})}, want {want}")
            for r in ag:
                L = int(r["layer"])
                # A ring allgather of equal blocks: each worker sends (P - 1) blocks.
                check(int(r["phase_bytes_sent"]) == (P - 1) * ks[L] * 8,
                      f"case {ci} t={t} layer {L}: bytes {r['phase_bytes_sent']}")
    if failures:
        sys.exit(f"lags_reference: {failures} failure(s)")
    print("lags_reference: 3 cases, 4 iterations each: picks, aggregate and bytes exact")


if __name__ == "__main__":
    main()
