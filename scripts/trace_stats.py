#!/usr/bin/env python3
"""trace_stats.py - the statistics docs/CALIBRATION.md compares between recorded and synthetic
gradient traces, as tidy CSV files.

    .venv/bin/python3 scripts/trace_stats.py --label mlp-recorded TRACE_DIR -o OUT_DIR
        [--densities 0.01,0.001] [--iterations ID,...]

For every iteration of the trace (or the listed ones) it appends rows to four files in OUT_DIR
(created if needed; a file that exists keeps its rows and gets the new ones, so several traces
go into one table):

  layers.csv   per layer: RMS over the workers' values (the median over workers), the spread
               of the workers' RMS, the fraction of exact zeros, the excess kurtosis and tail
               quantiles of |g| / RMS, and the mean pairwise correlation of the workers'
               gradients (the generator's `signal`)
  tails.csv    the complementary CDF P(|g| / RMS_layer > x) over every element of the
               multi-dimensional tensors (the weights), for x on a log grid
  overlap.csv  per density: the pairwise overlap |S_i & S_j| / k of the workers' top-k sets
               (k = floor(d n) over the whole gradient, as topk selects), mean/min/max over
               pairs
  buildup.csv  per density and P in 1, 2, 4, ...: |U| / k with U the union of the top-k sets
               of workers 0 .. P-1 (the topk method's gradient build-up)
  topk_layers.csv  per density and layer: the layer's share of the workers' top-k entries

Needs numpy and safetensors (scripts/install-deps.sh puts both into .venv).
"""
import argparse
import csv
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file


def layer_table(manifest):
    layers, off = [], 0
    for L in manifest["model"]["layers"]:
        numel = int(np.prod(L["shape"]))
        layers.append((L["name"], len(L["shape"]), off, numel))
        off += numel
    return layers, off


def append_rows(path, header, rows):
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(header)
        w.writerows(rows)


def topk_sets(G, k):
    """Indices of the k largest |g| of every worker, sorted (ties: numpy's order)."""
    sets = []
    for g in G:
        idx = np.argpartition(np.abs(g), len(g) - k)[len(g) - k:]
        sets.append(np.sort(idx))
    return sets


X_GRID = np.round(np.logspace(np.log10(0.25), np.log10(40), 34), 4)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--densities", default="0.01,0.001")
    ap.add_argument("--iterations", default="")
    a = ap.parse_args()
    with open(os.path.join(a.trace, "manifest.json")) as f:
        man = json.load(f)
    layers, n = layer_table(man)
    P = man["workers"]
    ids = man["iterations"]
    if a.iterations:
        want = [int(x) for x in a.iterations.split(",")]
        missing = [i for i in want if i not in ids]
        if missing:
            sys.exit(f"trace_stats: {a.trace}: no iteration {missing[0]} (has {ids})")
        ids = want
    dens = [float(x) for x in a.densities.split(",")]
    os.makedirs(a.out, exist_ok=True)
    for it in ids:
        tensors = load_file(os.path.join(a.trace, f"iter_{it:06d}.safetensors"))
        G = np.stack([tensors[f"worker.{w:04d}"] for w in range(P)]).astype(np.float64)
        lrows, zs = [], []
        for li, (name, ndim, off, numel) in enumerate(layers):
            X = G[:, off:off + numel]
            rms_w = np.sqrt(np.mean(X * X, axis=1))
            rms = np.sqrt(np.mean(X * X))
            z = np.abs(X) / rms if rms > 0 else np.zeros_like(X)
            m2 = np.mean(z ** 2)
            kurt = np.mean(z ** 4) / (m2 * m2) - 3 if m2 > 0 else float("nan")
            q = np.quantile(z, [0.5, 0.99, 0.999, 0.9999])
            # Mean pairwise correlation (uncentred: gradients have no meaningful mean to remove,
            # and the generator's signal is exactly this ratio).
            if P > 1 and rms > 0:
                # sum over pairs i != j of <g_i, g_j>, over (P - 1) times sum_i <g_i, g_i>.
                s = X.sum(axis=0)
                q2 = np.sum(X * X)
                corr = (np.dot(s, s) - q2) / ((P - 1) * q2)
            else:
                corr = float("nan")
            lrows.append([a.label, man["model"]["name"], it, li, name, ndim, numel, P,
                          f"{np.median(rms_w):.6g}", f"{rms_w.min():.6g}", f"{rms_w.max():.6g}",
                          f"{np.mean(X == 0):.6g}", f"{kurt:.6g}", f"{q[0]:.6g}", f"{q[1]:.6g}",
                          f"{q[2]:.6g}", f"{q[3]:.6g}", f"{np.mean(z > 4):.6g}", f"{corr:.6g}"])
            if ndim > 1:
                zs.append(z.ravel())
        append_rows(os.path.join(a.out, "layers.csv"),
                    ["label", "model", "iteration", "layer", "name", "ndim", "numel", "P", "rms",
                     "rms_min", "rms_max", "zero_fraction", "excess_kurtosis", "q50", "q99",
                     "q999", "q9999", "frac_above_4rms", "worker_correlation"], lrows)
        zall = np.sort(np.concatenate(zs))
        ccdf = 1.0 - np.searchsorted(zall, X_GRID, side="right") / len(zall)
        append_rows(os.path.join(a.out, "tails.csv"), ["label", "model", "iteration", "x", "ccdf"],
                    [[a.label, man["model"]["name"], it, x, f"{c:.6g}"] for x, c in zip(X_GRID, ccdf)])
        orow, brow, srow = [], [], []
        offsets = np.array([off for (_, _, off, _) in layers])
        for d in dens:
            k = max(1, int(d * n))
            sets = topk_sets(G, k)
            # Where the picks fall: each layer's share of the workers' top-k entries.
            counts = np.zeros(len(layers))
            for st in sets:
                counts += np.bincount(np.searchsorted(offsets, st, side="right") - 1,
                                      minlength=len(layers))
            for li, (name, _, _, numel) in enumerate(layers):
                srow.append([a.label, man["model"]["name"], it, d, li, name, numel,
                             f"{counts[li] / (k * P):.6g}"])
            ov = [len(np.intersect1d(sets[i], sets[j], assume_unique=True)) / k
                  for i in range(P) for j in range(i + 1, P)]
            if ov:
                orow.append([a.label, man["model"]["name"], it, d, k, P, f"{np.mean(ov):.6g}",
                             f"{np.min(ov):.6g}", f"{np.max(ov):.6g}"])
            p = 1
            while p <= P:
                u = np.unique(np.concatenate(sets[:p]))
                brow.append([a.label, man["model"]["name"], it, d, k, p, f"{len(u) / k:.6g}"])
                p *= 2
        append_rows(os.path.join(a.out, "overlap.csv"),
                    ["label", "model", "iteration", "density", "k", "P", "overlap_mean",
                     "overlap_min", "overlap_max"], orow)
        append_rows(os.path.join(a.out, "topk_layers.csv"),
                    ["label", "model", "iteration", "density", "layer", "name", "numel", "share"],
                    srow)
        append_rows(os.path.join(a.out, "buildup.csv"),
                    ["label", "model", "iteration", "density", "k", "P", "buildup"], brow)
        print(f"trace_stats: {a.label} iteration {it}: {len(layers)} layers, P = {P}", file=sys.stderr)


if __name__ == "__main__":
    main()
