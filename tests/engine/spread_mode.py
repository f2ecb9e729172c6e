#!/usr/bin/env python3
"""Spread mode (docs/CLUSTER.md, "Spread mode"): `mpirun -n R deftsim run SCENARIO` spreads
each point's P simulated workers over R ranks.

Every method spread mode runs (SPREAD below) at d = 0.02 over three iterations of a small
synthetic model (a table of eleven tensors written here, 2-D weights and 1-D biases), with full error feedback, the quality
metrics on and [network] compute = none, at P = 5 and 7, runs once as one process and under
`mpirun --oversubscribe -n R` for R = 1, 2, 3 and 4 (P not divisible by R; at R = 4 and P = 5
one rank holds a single worker). Checked:

  - every column but the measured times (tests/reliability/rowcmp.py's MEASURED) is the same
    text in both runs: selections, counts, bytes, the aggregate's metrics (captured norm,
    lost mass, thresholds) and, with compute = none, the simulated times;
  - the --dump of every worker's selection and of the aggregate's values (which no column
    shows) has the same bytes;
  - only rank 0 wrote: one rows.csv and one manifest, the point files of one run;
  - `mpirun -n 3 deftsim sweep` gives the rows.csv of a one-process sweep (untimed columns);
  - the memory plan is per rank: with a --ram that refuses ResNet-18 at P = 12 as one process
    (exit 2, the plan's message), the same point's plan fits on each of 4 ranks
    (--dry-run exits 0);
  - a rank killed mid-point (SIGKILL to rank 1) ends the run with a non-zero exit and leaves
    no committed point file and no rows.csv;
  - a rank that fails (rank 0 refusing a folder that holds another run) ends every rank with
    its message ("spread mode, rank 0 of 2: ...") and exit status 2, the folder untouched;
  - a method spread mode does not run (SPREAD_REFUSED, a comma-separated list that
    tests/engine/meson.build sets; none today) is refused with a message naming it, before any row is
    written (tests/sparsify/test_registry.c checks the refusal itself).

Exit 77 (skipped) when deftsim was built without MPI or mpirun is missing. Run by meson test
(suite fast); DEFTSIM_EXE, DEFTSIM_SOURCE_ROOT and DEFTSIM_MPI as tests/engine/meson.build sets.
"""
import csv
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

EXE = os.environ.get("DEFTSIM_EXE")
ROOT = os.environ.get("DEFTSIM_SOURCE_ROOT")
if not EXE or not ROOT:
    sys.exit("DEFTSIM_EXE or DEFTSIM_SOURCE_ROOT is not set (run through meson test)")
if os.environ.get("DEFTSIM_MPI") != "1":
    print("deftsim was built without MPI: skipped")
    sys.exit(77)
MPIRUN = shutil.which("mpirun")
if not MPIRUN:
    print("no mpirun on PATH: skipped")
    sys.exit(77)
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
os.environ.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
# Ranks waiting in MPI give the cores back to the ranks that compute (two cores, four ranks).
os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
sys.path.insert(0, os.path.join(ROOT, "tests", "reliability"))
from rowcmp import MEASURED  # noqa: E402

import registry  # noqa: E402

# Every method of the registry but those spread mode refuses, unless SPREAD_METHODS names some.
NOT_YET = [m for m in os.environ.get("SPREAD_REFUSED", "").split(",") if m]
SPREAD = (os.environ["SPREAD_METHODS"].split(",") if os.environ.get("SPREAD_METHODS")
          else [m for m in registry.methods(EXE) if m not in NOT_YET])
COUNTS = [5, 7]
RANKS = [1, 2, 3, 4]
# Weights of two dimensions and more (DGC samples and filters those; one-dimensional tensors
# it sends dense), and one small 2-D tensor below DGC's sampling floor.
SHAPES = [("16x250", "conv1.weight"), ("64", "bn1.weight"), ("30x300", "conv2.weight"),
          ("128", "bn2.weight"), ("60x250", "layer3.weight"), ("3000", "layer3.bias"),
          ("80x250", "layer4.weight"), ("3x10", "layer4.small"), ("512", "bn4.weight"),
          ("10x512", "fc.weight"), ("10", "fc.bias")]

failures = []


def fail(what):
    failures.append(what)
    print("FAIL:", what, file=sys.stderr, flush=True)


def run(cmd, what, expect=0, timeout=280):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if expect is not None and p.returncode != expect:
        sys.exit(f"{what}: exit {p.returncode}, expected {expect}\n{p.stdout}\n{p.stderr}")
    return p


def mpi(R):
    return [MPIRUN, "--oversubscribe", "-n", str(R)]


def rows(path):
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    return r[0], r[1:]


def compare(what, ref, got):
    (h1, a), (h2, b) = ref, got
    if h1 != h2:
        fail(f"{what}: different headers")
        return
    if len(a) != len(b):
        fail(f"{what}: {len(a)} rows as one process, {len(b)} spread")
        return
    cols = [i for i, n in enumerate(h1) if n not in MEASURED]
    for x, y in zip(a, b):
        for i in cols:
            if x[i] != y[i]:
                fail(f"{what}: {x[h1.index('method')]} P={x[h1.index('P')]} iteration "
                     f"{x[h1.index('iteration')]} worker {x[h1.index('worker')]} "
                     f"{x[h1.index('phase')]}: {h1[i]} {x[i]!r} as one process, {y[i]!r} spread")
                return


def main():
    tmp = tempfile.mkdtemp(prefix="deftsim_spread_")
    try:
        model = os.path.join(tmp, "small.csv")
        with open(model, "w") as f:
            f.write("index,name,shape,numel\n")
            for i, (shape, name) in enumerate(SHAPES):
                numel = 1
                for d in shape.split("x"):
                    numel *= int(d)
                f.write(f"{i},{name},{shape},{numel}\n")
        scen = os.path.join(tmp, "spread.ini")
        with open(scen, "w") as f:
            f.write(f"""[scenario]
name = spread
seed = 17
iterations = 3
[gradients]
source = synthetic
model = {model}
[sparsify]
methods = {", ".join(SPREAD)}
densities = 0.02
error_feedback = full
oktopk_warmup = 0
powersgd_start_iter = 1
[workers]
counts = {", ".join(str(c) for c in COUNTS)}
[network]
compute = none
""")
        one = os.path.join(tmp, "one")
        run([EXE, "run", scen, "-o", one, "-q", "--dump", os.path.join(tmp, "dump1")],
            "one process")
        ref = rows(os.path.join(one, "rows.csv"))
        dumps = sorted(os.path.relpath(x, os.path.join(tmp, "dump1"))
                       for x in glob.glob(os.path.join(tmp, "dump1", "**", "*.npy"), recursive=True))
        if not dumps:
            fail("the one-process run dumped nothing")
        for R in RANKS:
            out = os.path.join(tmp, f"R{R}")
            dump = os.path.join(tmp, f"dump{R}x")
            p = run(mpi(R) + [EXE, "run", scen, "-o", out, "--dump", dump],
                    f"spread over {R} ranks")
            compare(f"R={R}", ref, rows(os.path.join(out, "rows.csv")))
            # The selections and the aggregate's values, which no column shows: the same bytes.
            for rel in dumps:
                a, b = os.path.join(tmp, "dump1", rel), os.path.join(dump, rel)
                if not os.path.exists(b) or open(a, "rb").read() != open(b, "rb").read():
                    fail(f"R={R}: dump {rel} differs from one process's")
                    break
            files = sorted(os.path.basename(x) for x in glob.glob(os.path.join(out, "points", "*")))
            want = sorted(os.path.basename(x) for x in glob.glob(os.path.join(one, "points", "*")))
            if files != want:
                fail(f"R={R}: point files {files}, one process wrote {want}")
            if p.stderr.count("points,") > 1 or p.stderr.count("-> ") > 1:
                fail(f"R={R}: more than one rank reported the run:\n{p.stderr}")
            print(f"R={R}: {len(ref[1])} rows, untimed columns equal", flush=True)

        # deftsim sweep in spread mode: the same rows.csv as one process's sweep.
        sw1 = os.path.join(tmp, "sweep1")
        run([EXE, "sweep", scen, "-o", sw1, "-q"], "sweep, one process")
        sw3 = os.path.join(tmp, "sweep3")
        p = run(mpi(3) + [EXE, "sweep", scen, "-o", sw3, "--progress", "lines"],
                "sweep spread over 3 ranks")
        compare("sweep R=3", rows(os.path.join(sw1, "rows.csv")), rows(os.path.join(sw3, "rows.csv")))
        if p.stderr.count("points:") != 1:
            fail(f"sweep R=3: not one closing line:\n{p.stderr}")
        print("sweep R=3: rows.csv untimed columns equal", flush=True)

        # The memory plan per rank: ResNet-18, P = 12, full residuals of 44.7 MB each.
        big = os.path.join(tmp, "big.ini")
        with open(big, "w") as f:
            f.write("""[scenario]
seed = 1
iterations = 1
[gradients]
source = synthetic
model = resnet18_cifar10
[sparsify]
methods = topk
densities = 0.01
error_feedback = full
[workers]
counts = 12
""")
        p = run([EXE, "run", big, "--dry-run", "--ram", "600M", "-o", os.path.join(tmp, "b1")],
                "one process, 600M", expect=2)
        if "P = 12 needs" not in p.stderr:
            fail(f"one process at 600M: no memory-plan message:\n{p.stderr}")
        p = run(mpi(4) + [EXE, "run", big, "--dry-run", "--ram", "600M", "-o",
                          os.path.join(tmp, "b4")], "4 ranks, 600M each")
        print("memory plan: refused as one process, fits on 4 ranks of 600M", flush=True)

        # A rank killed mid-point: nothing committed.
        slow = os.path.join(tmp, "slow.ini")
        with open(slow, "w") as f:
            f.write(open(big).read().replace("iterations = 1", "iterations = 40")
                    .replace("counts = 12", "counts = 4"))
        out = os.path.join(tmp, "killed")
        proc = subprocess.Popen(mpi(2) + [EXE, "run", slow, "-o", out, "-q"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        victim = None
        t0 = time.time()
        while victim is None and time.time() - t0 < 60 and proc.poll() is None:
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read()
                except OSError:
                    continue
                if b"OMPI_COMM_WORLD_RANK=1" in env and cmd.startswith(EXE.encode()) and \
                        slow.encode() in cmd:
                    victim = int(pid)
            time.sleep(0.2)
        if victim is None:
            fail("no rank 1 to kill")
            proc.kill()
        else:
            time.sleep(3)
            os.kill(victim, signal.SIGKILL)
        proc.communicate(timeout=120)
        if proc.returncode == 0:
            fail("a run with a killed rank exited 0")
        committed = glob.glob(os.path.join(out, "points", "*.csv"))
        if committed or os.path.exists(os.path.join(out, "rows.csv")):
            fail(f"a killed rank left results: {committed}")
        print(f"killed rank 1: exit {proc.returncode}, nothing committed", flush=True)

        # A rank that fails before any point (rank 0: the folder holds another run) ends every
        # rank at once with its message and the input error's status, and writes nothing.
        taken = os.path.join(tmp, "taken")
        run([EXE, "run", big, "-o", taken, "-q", "--set", "scenario.seed=2",
             "--set", "workers.counts=2"], "another run into the folder")
        before = sorted(os.listdir(taken))
        p = run(mpi(2) + [EXE, "run", scen, "-o", taken, "-q"], "spread into a taken folder",
                expect=None, timeout=120)
        if p.returncode != 2 or "spread mode, rank 0 of 2" not in p.stderr or \
                "holds the results of another run" not in p.stderr:
            fail(f"spread into a taken folder: exit {p.returncode}, stderr {p.stderr!r}")
        if sorted(os.listdir(taken)) != before:
            fail(f"spread into a taken folder changed it: {sorted(os.listdir(taken))}")
        print(f"rank 0 refused the folder: exit {p.returncode}, every rank ended", flush=True)

        for m in NOT_YET:
            s2 = os.path.join(tmp, f"no_{m}.ini")
            with open(s2, "w") as f:
                f.write(open(scen).read().replace(f"methods = {', '.join(SPREAD)}",
                                                  f"methods = {m}"))
            out = os.path.join(tmp, f"no_{m}")
            p = run(mpi(2) + [EXE, "run", s2, "-o", out, "-q"], f"{m} spread", expect=None)
            if p.returncode == 0 or "spread mode" not in p.stderr or m not in p.stderr:
                fail(f"{m} spread: exit {p.returncode}, stderr {p.stderr!r}")
            if glob.glob(os.path.join(out, "points", "*.csv")):
                fail(f"{m} spread: a point file was committed")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} failure(s)")
    print("spread mode: OK")


main()
