#!/usr/bin/env python3
"""Determinism of deftsim run: the same seed gives the same selections, bytes and simulated
communication times, whatever the thread counts; another seed gives other selections.

For three scenarios (the synthetic generator with error_feedback = full on 1.18 M elements,
the generator with error_feedback = sampled, and the recorded trace traces/fmnist_cnn_p4,
421 k elements, read only), every sparsifier of the registry but those that send everything
(dense), Ok-Topk without its warm-up, at P =
3 and 4 runs twice with the same seed and [network] compute = none: once with [device]
threads = 1 and --prep-threads 1, once with [device] threads = 4 and --prep-threads 3 (the
network simulation has no thread setting: one SimGrid process per point). Compared:

  - the --dump trees byte for byte: every worker's selected indices, every iteration's union
    and aggregated values (.npy);
  - rows.csv: every column except the measured times (phase_seconds, select_seconds,
    worker_seconds, imbalance_seconds, prepare_seconds, step_seconds) and the thread count the
    row names (threads), exactly: bytes, counts, captured fractions, costs, ... and every
    simulated column (sim_start, sim_end, comm_seconds, select_critical_seconds,
    iteration_seconds), which with compute = none depend on the bytes alone.

With the default compute = measured the simulation is fed the measured compute phases, so its
times cannot agree to the last bit: for the trace, two more runs (the same two thread
settings) must agree in every column but the measured and the simulated times exactly, and in
the simulated times within what the measured compute allows (rowcmp.py); the network is put at
80 bit/s and 1 s latency there, where that is about 1e-7 to 1e-4 of them.

A run with [sparsify] deft_norms = separate (one thread) must agree with the default fused
norms in the same way: the dumps byte for byte and every column but the measured times.

Then a third run with another seed must change the selections: of every method with the
generator, of DGC and randk (whose sampling and draws use the seed) with the trace, where the
other methods' selections are functions of the recorded gradients alone and must stay the same.

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

# 1.18 M elements: the CPU kernels split an operation over [device] threads from 2^19 elements
# of work (kernels/cpu/cpu_backend.c, CPU_PAR_MIN), so the whole gradient and fc1.weight take
# the threaded paths; DEFT's fragments stay on the in-cache one.
MODEL = """index,name,shape,numel
0,conv.weight,32x3x3x3,864
1,conv.bias,32,32
2,fc1.weight,1024x1024,1048576
3,fc1.bias,1024,1024
4,fc2.weight,128x1024,131072
5,fc2.bias,128,128
"""
# Every method of the registry whose selections depend on the gradients (not dense's).
METHODS = registry.methods(EXE, without=("sends-all",))
# The methods whose selections draw from the seed: DGC's sampling, Random-k's draws.
SEEDED = {"dgc", "randk"}
ONE = ["--set", "device.threads=1", "--prep-threads", "1"]
MANY = ["--set", "device.threads=4", "--prep-threads", "3"]

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


def differing_methods(a, b):
    """Methods whose dumps differ somewhere (the file sets are those of one scenario)."""
    out = set()
    for f in files(a):
        fb = os.path.join(b, f)
        if not os.path.exists(fb) or not filecmp.cmp(os.path.join(a, f), fb, shallow=False):
            out.add(f.split(os.sep)[0])
    return out


def rows(path):
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    return r[0], r[1:]


def same_rows(what, a, b):
    """compute = none: every column but the measured times and threads, to the last digit."""
    ha, ra = rows(a)
    hb, rb = rows(b)
    w = rowcmp.compare(f"{what}: rows.csv", ha, ra, hb, rb, fail, skip=("threads",),
                       exact_simulated=True)
    if w is None:
        return
    # The simulated columns must be there to be compared (simulate = 1).
    ci = ha.index("comm_seconds")
    simulated = sum(1 for r in ra if r[ci] != "")
    if simulated != len(ra):
        fail(f"{what}: {len(ra) - simulated} of {len(ra)} rows have no comm_seconds")
        return
    print(f"  {what}: {len(ra)} rows agree in every column but the measured times and "
          f"threads, simulated times to the last digit", flush=True)


def close_rows(what, a, b):
    """compute = measured: the simulated times within what the measured compute allows."""
    ha, ra = rows(a)
    hb, rb = rows(b)
    w = rowcmp.compare(f"{what}: rows.csv", ha, ra, hb, rb, fail, skip=("threads",))
    if w is not None:
        print(f"  {what}: {len(ra)} rows agree; simulated times within {w:.2f} of what the "
              f"measured compute allows", flush=True)


def main():
    tmp = tempfile.mkdtemp(prefix="deftsim-determinism-")
    try:
        model = os.path.join(tmp, "model.csv")
        with open(model, "w") as f:
            f.write(MODEL)
        common = f"""[sparsify]
methods = {", ".join(METHODS)}
densities = 0.01
oktopk_warmup = 0
[workers]
counts = 3, 4
[network]
compute = none
"""
        scenarios = {
            "synthetic": f"[scenario]\nname = det\nseed = 21\niterations = 2\n"
                         f"[gradients]\nmodel = {model}\n" + common,
            "synthetic-sampled": f"[scenario]\nname = det\nseed = 21\niterations = 2\n"
                                 f"[gradients]\nmodel = {model}\n" +
                                 common.replace("[workers]", "error_feedback = sampled\n"
                                                "sampled_workers = 2\n[workers]"),
            "trace": f"[scenario]\nname = det\nseed = 21\niterations = 2\n"
                     f"[gradients]\nsource = trace\ntrace = {TRACE}\n" + common,
        }
        for name, text in scenarios.items():
            scen = os.path.join(tmp, name + ".ini")
            with open(scen, "w") as f:
                f.write(text)
            d = os.path.join(tmp, name)
            run(scen, d + "/a", d + "/dump_a", ONE)
            run(scen, d + "/b", d + "/dump_b", MANY)
            n = same_dumps(name, d + "/dump_a", d + "/dump_b")
            print(f"{name}: threads 1 / prep 1 against threads 4 / prep 3: {n} .npy files "
                  f"identical", flush=True)
            if n and n < 50:
                fail(f"{name}: only {n} dump files")
            same_rows(name, d + "/a/rows.csv", d + "/b/rows.csv")
            # [sparsify] deft_norms: the default fused norms (a) against the separate pass.
            run(scen, d + "/s", d + "/dump_s", ONE + ["--set", "sparsify.deft_norms=separate"])
            n = same_dumps(name + ", deft_norms fused/separate", d + "/dump_a", d + "/dump_s")
            print(f"{name}: deft_norms fused against separate: {n} .npy files identical",
                  flush=True)
            same_rows(name + ", deft_norms fused/separate", d + "/a/rows.csv", d + "/s/rows.csv")
            if name == "trace":
                slow = ["--set", "network.compute=measured", "--set", "network.bandwidth=80bps",
                        "--set", "network.latency=1s"]
                run(scen, d + "/ma", d + "/dump_ma", ONE + slow)
                run(scen, d + "/mb", d + "/dump_mb", MANY + slow)
                close_rows(name + ", compute = measured", d + "/ma/rows.csv", d + "/mb/rows.csv")
            if name == "synthetic-sampled":
                continue
            run(scen, d + "/c", d + "/dump_c", ONE + ["--set", "scenario.seed=22"])
            diff = differing_methods(d + "/dump_a", d + "/dump_c")
            print(f"  {name}: seed 22 against 21: selections differ for {sorted(diff)}",
                  flush=True)
            want = set(METHODS) if name == "synthetic" else SEEDED
            if not want <= diff:
                fail(f"{name}: seed 22 gave the selections of seed 21 for "
                     f"{sorted(want - diff)}")
            if name == "trace" and diff - SEEDED:
                fail(f"trace: the seed changed the selections of {sorted(diff - SEEDED)}, "
                     f"which depend on the recorded gradients alone")
    finally:
        if failures:
            print(f"the runs are kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s)", file=sys.stderr)
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
