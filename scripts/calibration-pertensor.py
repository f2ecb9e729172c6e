#!/usr/bin/env python3
"""calibration-pertensor.py - what a parameter set would give if every tensor sat at its own
recorded scale (docs/GENERATOR.md, "Validation"): the shape of the per-tensor scales against
the kinds' lines and scatter, with everything else the set's.

For a recorded trace and a parameter file it generates synthetic traces of the trace's model
table (8 workers, one iteration, each seed) with the set, then multiplies each tensor of every
worker by (recorded RMS / synthetic RMS), the RMS being the median over the workers (the
recorded one: the mean of log10 over the given iterations). It prints the statistics of
scripts/calibration-validate.py at density 0.01 for the recorded iterations, the set as it is,
and the set with the per-tensor scales, each synthetic column the mean over the seeds.

    scripts/calibration-pertensor.py TRACE --params FILE [--seeds 1,2] [--iterations 200,201]
        [--deftsim build/deftsim]
"""
import argparse
import importlib.util
import os
import subprocess
import tempfile

import numpy as np
from safetensors.numpy import load_file

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("cv", os.path.join(here, "calibration-validate.py"))
cv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cv)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--params", required=True)
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--iterations", default="200,201")
    ap.add_argument("--deftsim", default="build/deftsim")
    a = ap.parse_args()
    man = cv.manifest(a.trace)
    P = man["workers"]
    layers = man["model"]["layers"]
    numels = [int(np.prod(l["shape"])) for l in layers]
    bounds = np.cumsum([0] + numels)

    def rms(g):
        return np.sqrt(np.add.reduceat(g.astype(np.float64) ** 2, bounds[:-1]) / np.array(numels))

    its = [int(x) for x in a.iterations.split(",")]
    log_rec, rec = np.zeros(len(numels)), []
    for it in its:
        gs = cv.gradients(a.trace, it, P)
        log_rec += np.log10(np.median([rms(g) for g in gs], axis=0)) / len(its)
        rec.append(cv.stats(gs, numels, 0.01))
        del gs
    as_is, shaped = [], []
    with tempfile.TemporaryDirectory(prefix="deftsim_pertensor_") as tmp:
        table = os.path.join(tmp, "model.csv")
        with open(table, "w") as f:
            f.write("index,name,shape,numel\n")
            for i, l in enumerate(layers):
                f.write(f"{i},{l['name']},{'x'.join(map(str, l['shape']))},{numels[i]}\n")
        for s in a.seeds.split(","):
            out = os.path.join(tmp, "t" + s)
            subprocess.run([a.deftsim, "trace", "gen", "--model", table, "--workers", str(P),
                            "--iterations", "1", "--seed", s, "--params", a.params, "-o", out],
                           check=True, capture_output=True)
            t = load_file(os.path.join(out, "iter_000000.safetensors"))
            gs = [t[f"worker.{w:04d}"] for w in range(P)]
            del t
            subprocess.run(["rm", "-rf", out], check=True)
            as_is.append(cv.stats(gs, numels, 0.01))
            log_syn = np.log10(np.median([rms(g) for g in gs], axis=0))
            factor = np.repeat(10 ** (log_rec - log_syn), numels).astype(np.float32)
            shaped.append(cv.stats([g * factor for g in gs], numels, 0.01))
            del gs
    r, b, c = cv.mean_stats(rec), cv.mean_stats(as_is), cv.mean_stats(shaped)
    print(f"{os.path.basename(a.trace)}: recorded iterations {its}; synthetic seeds {a.seeds}; "
          f"params {a.params}")
    print(f"{'statistic':22s} {'recorded':>9s} {'set':>9s} {'err':>8s} {'per-tensor':>10s} "
          f"{'err':>8s}")
    for k in cv.STATS:
        if k in r:
            print(f"{k:22s} {r[k]:9.4f} {b[k]:9.4f} {100 * (b[k] / r[k] - 1):+7.1f}% "
                  f"{c[k]:10.4f} {100 * (c[k] / r[k] - 1):+7.1f}%")


if __name__ == "__main__":
    main()
