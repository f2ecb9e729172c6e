#!/usr/bin/env python3
"""The timing protocol changes times only (docs/TIMING.md): a run with [timing] repeats = 1
and runs with repeats = 3 (statistic min, cache cold) and repeats = 4 (median, warm) give the
same selections and the same rows in every column but the measured times.

Every sparsifier of the registry (deftsim config --methods) at P = 1, 3 and 4 runs over
three iterations (the trace: its two), with [network] compute = none, on the synthetic generator with
error_feedback = full, none and sampled (2 workers), on the generator with CLT-k's low-pass
filter (cltk_beta = 0.5: the repetitions hand the sparsifier the gradient too), and on the
recorded trace traces/fmnist_cnn_p4. Compared with the repeats = 1 run:

  - the --dump trees byte for byte: every worker's selected indices, every iteration's union
    and aggregated values, so the residuals carried between iterations are the same too (a
    repetition that wrote back into a residual would change the next iteration's selections);
  - rows.csv: every column except the measured times (rowcmp.MEASURED: phase_seconds and its
    _min and _max, select_seconds and its _min and _max, worker_seconds, imbalance_seconds,
    prepare_seconds, step_seconds), exactly, the simulated times included.

And the rows' repetition spread is well formed: phase_seconds_min <= phase_seconds_max, equal
with repeats = 1, where the estimate is the one time.

Run by meson test (suite fast); DEFTSIM_EXE and DEFTSIM_SOURCE_ROOT as set by tests/meson.build.
"""
import csv
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile

import registry
import rowcmp

EXE = os.environ.get("DEFTSIM_EXE")
ROOT = os.environ.get("DEFTSIM_SOURCE_ROOT")
if not EXE or not ROOT:
    sys.exit("DEFTSIM_EXE or DEFTSIM_SOURCE_ROOT is not set (run through meson test)")
TRACE = os.path.join(ROOT, "traces", "fmnist_cnn_p4")

MODEL = """index,name,shape,numel
0,conv.weight,32x3x3x3,864
1,conv.bias,32,32
2,fc1.weight,256x512,131072
3,fc1.bias,256,256
4,fc2.weight,10x256,2560
5,fc2.bias,10,10
"""
METHODS = registry.methods(EXE)  # every method of the registry
PROTOCOLS = {
    "r1": ["--set", "timing.repeats=1"],
    "r3": ["--set", "timing.repeats=3", "--set", "timing.statistic=min",
           "--set", "timing.cache=cold"],
    "r4": ["--set", "timing.repeats=4", "--set", "timing.statistic=median",
           "--set", "timing.cache=warm"],
}

failures = []


def fail(what):
    failures.append(what)
    print("FAIL:", what, file=sys.stderr, flush=True)


def run(scen, out, dump, extra):
    p = subprocess.run([EXE, "run", scen, "-q", "--set", f"scenario.output={out}",
                        "--dump", dump, *extra], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"deftsim run {scen} {' '.join(extra)}: exit {p.returncode}\n{p.stderr}")


def files(root):
    out = []
    for d, _, names in os.walk(root):
        for n in names:
            out.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(out)


def same_dumps(what, a, b):
    fa, fb = files(a), files(b)
    if fa != fb:
        fail(f"{what}: the dumps hold other files: {sorted(set(fa) ^ set(fb))[:5]}")
        return 0
    for f in fa:
        if not filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False):
            fail(f"{what}: {f} differs")
            return 0
    return len(fa)


def rows(path):
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    return r[0], r[1:]


def spread_ok(what, path, single):
    head, body = rows(path)
    kind, lo, hi, est = (head.index(c) for c in ("phase_kind", "phase_seconds_min",
                                                 "phase_seconds_max", "phase_seconds"))
    for i, r in enumerate(body):
        if r[kind] != "compute":
            continue
        a, b, e = float(r[lo]), float(r[hi]), float(r[est])
        if not (0 <= a <= b):
            fail(f"{what}: row {i + 1}: phase_seconds_min {a} > phase_seconds_max {b}")
            return
        if single and not (a == b == e):
            fail(f"{what}: row {i + 1}: repeats = 1 but min {a}, max {b}, estimate {e}")
            return


def main():
    tmp = tempfile.mkdtemp(prefix="deftsim-repeats-")
    try:
        model = os.path.join(tmp, "model.csv")
        with open(model, "w") as f:
            f.write(MODEL)
        common = f"""[sparsify]
methods = {", ".join(METHODS)}
densities = 0.01
oktopk_warmup = 1
[workers]
counts = 1, 3, 4
[network]
compute = none
"""
        head = "[scenario]\nname = rep\nseed = 9\niterations = 3\n"
        gen = f"[gradients]\nmodel = {model}\n"
        scenarios = {
            "full": head + gen + common,
            "none": head + gen + common.replace("[workers]", "error_feedback = none\n[workers]"),
            "sampled": head + gen + common.replace(
                "[workers]", "error_feedback = sampled\nsampled_workers = 2\n[workers]"),
            "cltk-filter": head + gen + common.replace(
                "[workers]", "cltk_beta = 0.5\n[workers]").replace(
                f"methods = {', '.join(METHODS)}", "methods = cltk"),
            "trace": head.replace("iterations = 3", "iterations = 2") +
                     f"[gradients]\nsource = trace\ntrace = {TRACE}\n" + common,
        }
        for name, text in scenarios.items():
            scen = os.path.join(tmp, name + ".ini")
            with open(scen, "w") as f:
                f.write(text)
            d = os.path.join(tmp, name)
            for proto, extra in PROTOCOLS.items():
                run(scen, f"{d}/{proto}", f"{d}/dump_{proto}", extra)
                spread_ok(f"{name} {proto}", f"{d}/{proto}/rows.csv", proto == "r1")
            ha, ra = rows(f"{d}/r1/rows.csv")
            for proto in ("r3", "r4"):
                n = same_dumps(f"{name}: {proto} against r1", f"{d}/dump_r1", f"{d}/dump_{proto}")
                hb, rb = rows(f"{d}/{proto}/rows.csv")
                w = rowcmp.compare(f"{name}: {proto} against r1: rows.csv", ha, ra, hb, rb, fail,
                                   exact_simulated=True)
                if w is not None and n:
                    print(f"{name}: {proto} against repeats = 1: {n} .npy files identical, "
                          f"{len(ra)} rows agree in every column but the measured times",
                          flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")


if __name__ == "__main__":
    main()
