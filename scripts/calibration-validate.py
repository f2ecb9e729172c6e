#!/usr/bin/env python3
"""calibration-validate.py - the synthetic generator against a recorded trace on statistics the
calibration does not fit (docs/GENERATOR.md, "Calibration").

For a recorded trace it writes the trace's model table, generates synthetic traces of the same
table and worker count with the generator's defaults and with a parameter file (by default the
one `deftsim trace calibrate` fits to the trace, written beside the synthetic traces), and
prints, for the recorded iterations of the fit's stage (id >= half the last id) and for each
synthetic trace, at density d (0.01):

  buildup_P4, buildup_P8  |union of the first P workers' top-k sets| / k (Top-k's build-up)
  overlap                 |S_i & S_j| / k, mean over all pairs of workers (whole gradient)
  deft_kj_top10           share of k that DEFT's allocation gives the 10% of fragments with the
                          largest k_j (fragments and k_j as sparsifiers/deftsim_deft.h: P = the
                          trace's workers, norms of worker 0)
  deft_norm_top10         share of the fragments' summed L2 norms in the 10% largest
  deft_imbalance          DEFT's packing: largest bin cost / mean bin cost (cost size log2 k_j)
  topk_top3_tensors       share of worker 0's top-k in the three tensors holding most of it
  topk_tensors_above_d    fraction of tensors (>= 1/d elements) whose top-k density exceeds d

Values: the mean over the workers (or pairs) and over the fit stage's iterations. The relative
error of each synthetic column against the recorded one is printed beside it; the calibrated
column is meant to be within 10%.

    scripts/calibration-validate.py TRACE [--params FILE] [--deftsim build/deftsim]
        [--density 0.01] [--seeds 1] [--work DIR] [--csv OUT.csv]
"""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
from safetensors.numpy import load_file

STATS = ["buildup_P4", "buildup_P8", "overlap", "deft_kj_top10", "deft_norm_top10",
         "deft_imbalance", "topk_top3_tensors", "topk_tensors_above_d"]


def manifest(trace):
    with open(os.path.join(trace, "manifest.json")) as f:
        return json.load(f)


def gradients(trace, iteration, workers):
    t = load_file(os.path.join(trace, f"iter_{iteration:06d}.safetensors"))
    return [t[f"worker.{w:04d}"] for w in range(workers)]


def topk_mask(g, k):
    idx = np.argpartition(np.abs(g), len(g) - k)[len(g) - k:]
    m = np.zeros(len(g), bool)
    m[idx] = True
    return m


def fragments(numels, P):
    """DEFT step 1: a tensor with more than n/P elements is cut into P near-equal pieces."""
    n, out, off = sum(numels), [], 0
    for t, s in enumerate(numels):
        if s * P > n:
            base, extra = divmod(s, P)
            for j in range(P):
                size = base + (1 if j < extra else 0)
                out.append((off, size, t))
                off += size
        else:
            out.append((off, s, t))
            off += s
    return out


def allocate_k(frags, norms, k):
    """DEFT step 2, as deftsim_deft_allocate_k."""
    order = sorted(range(len(frags)), key=lambda j: (-norms[j], j))
    remain_k, remain_norm, kj = k, float(sum(norms)), [0] * len(frags)
    for j in order:
        tau = math.floor(remain_k * norms[j] / remain_norm) if remain_norm > 0 else 0
        size = frags[j][1]
        kj[j] = size if size < tau else max(1, tau)
        remain_k -= kj[j]
        remain_norm -= norms[j]
    return kj


def pack_imbalance(frags, kj, P):
    """DEFT step 3: greedy longest-processing-time packing of the non-common fragments."""
    cost = [(f[1] * math.log2(k) if k > 1 else f[1], j) for j, (f, k) in enumerate(zip(frags, kj))
            if k < f[1]]
    cost.sort(key=lambda c: (-c[0], c[1]))
    bins = [0.0] * P
    for c, _ in cost:
        b = min(range(P), key=lambda i: (bins[i], i))
        bins[b] += c
    mean = sum(bins) / P
    return max(bins) / mean if mean > 0 else 1.0


def top_share(values, frac=0.1):
    v = np.sort(np.asarray(values, float))[::-1]
    m = max(1, int(math.ceil(frac * len(v))))
    return float(v[:m].sum() / v.sum()) if v.sum() > 0 else 0.0


def stats(grads, numels, d):
    P, n = len(grads), len(grads[0])
    k = max(1, int(math.ceil(d * n)))
    masks = [topk_mask(g, k) for g in grads]
    out = {}
    for p in (4, 8):
        if p <= P:
            u = np.zeros(n, bool)
            for m in masks[:p]:
                u |= m
            out[f"buildup_P{p}"] = float(u.sum() / k)
    pairs = [(a, b) for a in range(P) for b in range(a + 1, P)]
    out["overlap"] = float(np.mean([(masks[a] & masks[b]).sum() / k for a, b in pairs]))
    frags = fragments(numels, P)
    g0 = grads[0].astype(np.float64)
    norms = [float(np.sqrt(np.sum(g0[o:o + s] ** 2))) for o, s, _ in frags]
    kj = allocate_k(frags, norms, k)
    out["deft_kj_top10"] = top_share(kj)
    out["deft_norm_top10"] = top_share(norms)
    out["deft_imbalance"] = pack_imbalance(frags, kj, P)
    bounds = np.cumsum([0] + list(numels))
    per = np.add.reduceat(masks[0].astype(np.int64), bounds[:-1]) if len(numels) else []
    out["topk_top3_tensors"] = float(np.sort(per)[::-1][:3].sum() / k)
    big = [i for i, s in enumerate(numels) if s * d >= 1]
    out["topk_tensors_above_d"] = float(np.mean([per[i] / numels[i] > d for i in big])) \
        if big else 0.0
    return out


def mean_stats(rows):
    return {s: float(np.mean([r[s] for r in rows if s in r])) for s in rows[0]}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr}")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--params", help="parameter file (default: deftsim trace calibrate's fit)")
    ap.add_argument("--deftsim", default="build/deftsim")
    ap.add_argument("--density", type=float, default=0.01)
    ap.add_argument("--seeds", default="1", help="generator seeds, comma-separated")
    ap.add_argument("--work", help="folder for the synthetic traces (default results/"
                                   "calibration/<trace name>)")
    ap.add_argument("--csv", help="also write the table as tidy CSV")
    a = ap.parse_args()
    man = manifest(a.trace)
    name = os.path.basename(os.path.normpath(a.trace))
    work = a.work or os.path.join("results", "calibration", name)
    os.makedirs(work, exist_ok=True)
    layers = man["model"]["layers"]
    numels = [int(np.prod(L["shape"])) for L in layers]
    table = os.path.join(work, "model.csv")
    with open(table, "w") as f:
        f.write("index,name,shape,numel\n")
        for i, (L, s) in enumerate(zip(layers, numels)):
            f.write(f"{i},{L['name']},{'x'.join(str(d) for d in L['shape'])},{s}\n")
    P = int(man["workers"])
    params = a.params
    if not params:
        params = os.path.join(work, "calibrated.ini")
        run([a.deftsim, "trace", "calibrate", a.trace, "-o", params])
    last = man["iterations"][-1]
    fit = [t for t in man["iterations"] if t >= last // 2]
    cols = {}
    for t in man["iterations"]:
        cols[f"recorded it. {t}"] = stats(gradients(a.trace, t, P), numels, a.density)
    real = mean_stats([cols[f"recorded it. {t}"] for t in fit])
    for label, extra in (("default", []), ("calibrated", ["--params", params])):
        rows = []
        for seed in a.seeds.split(","):
            out = os.path.join(work, f"synthetic_{label}_s{seed}")
            if os.path.exists(out):
                run(["rm", "-rf", out])
            run([a.deftsim, "trace", "gen", "--model", table, "--workers", str(P),
                 "--iterations", "1", "--seed", seed, "-o", out] + extra)
            rows.append(stats(gradients(out, 0, P), numels, a.density))
            run(["rm", "-rf", out])
        cols[label] = mean_stats(rows)
    print(f"{name}: {man['model']['name']}, {P} workers, density {a.density}; recorded = mean of "
          f"iterations {fit}; synthetic seeds {a.seeds}; params {params}")
    heads = list(cols)
    print(f"{'statistic':24s} {'recorded':>9s} " + " ".join(f"{h:>14s}" for h in heads) +
          "  default err  calibrated err")
    worst = 0.0
    lines = []
    for s in STATS:
        if s not in real:
            continue
        err = {h: (cols[h][s] - real[s]) / real[s] if real[s] else float("nan")
               for h in ("default", "calibrated")}
        worst = max(worst, abs(err["calibrated"]))
        print(f"{s:24s} {real[s]:9.4f} " + " ".join(f"{cols[h][s]:14.4f}" for h in heads) +
              f"  {100 * err['default']:+10.1f}% {100 * err['calibrated']:+13.1f}%")
        lines += [(name, s, h, cols[h][s]) for h in heads] + [(name, s, "recorded", real[s])]
    print(f"largest calibrated error: {100 * worst:.1f}%")
    if a.csv:
        with open(a.csv + ".tmp", "w") as f:
            f.write("trace,statistic,column,value\n")
            for row in lines:
                f.write("%s,%s,%s,%.6g\n" % row)
        os.replace(a.csv + ".tmp", a.csv)


if __name__ == "__main__":
    main()
