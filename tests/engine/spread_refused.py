#!/usr/bin/env python3
"""Spread mode (docs/CLUSTER.md, "Spread mode") runs `deftsim run` and `deftsim sweep` only:
`deftsim train` started by an MPI launcher with more than one rank is refused before it
writes anything, instead of running every point once per rank into the same folder; so are
run and sweep in a build without MPI. (tests/engine/spread_mode.py runs spread mode itself.)

Checked, in every build (the launcher is recognised from its environment, not through MPI):

  - `deftsim train` with OMPI_COMM_WORLD_SIZE = 2 and with PMI_SIZE = 3, and in a build
    without MPI `deftsim run` and `deftsim sweep` likewise: exit status 2, the
    message naming the command, the number of ranks and spread mode, and no output folder;
  - OMPI_COMM_WORLD_SIZE = 1 (mpirun -n 1) runs as one process: exit 0 and rows.csv;
  - with MPI built and mpirun on PATH: `mpirun --oversubscribe -n 2 deftsim train` is
    refused the same way on both ranks, and no output folder is created.

Run by meson test (suite fast); DEFTSIM_EXE, DEFTSIM_SOURCE_ROOT and DEFTSIM_MPI as
tests/engine/meson.build sets.
"""
import os
import shutil
import subprocess
import sys
import tempfile

EXE = os.environ.get("DEFTSIM_EXE")
ROOT = os.environ.get("DEFTSIM_SOURCE_ROOT")
if not EXE or not ROOT:
    sys.exit("DEFTSIM_EXE or DEFTSIM_SOURCE_ROOT is not set (run through meson test)")
TRACE = os.path.join(ROOT, "traces", "fmnist_cnn_p4")
LAUNCH = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")

failures = []


def fail(what):
    failures.append(what)
    print("FAIL:", what, file=sys.stderr, flush=True)


def scenario(tmp, name, train=False):
    out = os.path.join(tmp, "out-" + name)
    path = os.path.join(tmp, name + ".ini")
    if train:
        text = f"""[scenario]
name = {name}
seed = 3
output = {out}
[sparsify]
methods = topk
densities = 0.01
[workers]
counts = 2
[train]
epochs = 1
"""
    else:
        text = f"""[scenario]
name = {name}
seed = 3
iterations = 1
output = {out}
[gradients]
source = trace
trace = {TRACE}
[sparsify]
methods = topk
densities = 0.01
[workers]
counts = 3
[network]
compute = none
"""
    with open(path, "w") as f:
        f.write(text)
    return path, out


def env_with(var, value):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH}
    if var:
        env[var] = value
    return env


def refused(cmd, env, ranks, command, out, what):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    if p.returncode != 2:
        fail(f"{what}: exit {p.returncode}, expected 2\n{p.stderr}")
    for part in (f"deftsim {command}:", f"{ranks} ranks", "spread mode"):
        if part not in p.stderr:
            fail(f"{what}: the message lacks '{part}': {p.stderr!r}")
    if os.path.exists(out):
        fail(f"{what}: {out} was created")


with tempfile.TemporaryDirectory() as tmp:
    run_ini, run_out = scenario(tmp, "r")
    if os.environ.get("DEFTSIM_MPI") != "1":
        refused([EXE, "run", "-q", run_ini], env_with("OMPI_COMM_WORLD_SIZE", "2"), 2, "run",
                run_out, "run, OMPI_COMM_WORLD_SIZE=2")
        refused([EXE, "run", "-q", run_ini], env_with("PMI_SIZE", "3"), 3, "run", run_out,
                "run, PMI_SIZE=3")
    sweep_ini, sweep_out = scenario(tmp, "s")
    if os.environ.get("DEFTSIM_MPI") != "1":
        refused([EXE, "sweep", "-q", sweep_ini], env_with("OMPI_COMM_WORLD_SIZE", "2"), 2,
                "sweep", sweep_out, "sweep, OMPI_COMM_WORLD_SIZE=2")
    train_ini, train_out = scenario(tmp, "t", train=True)
    refused([EXE, "train", "-q", train_ini], env_with("OMPI_COMM_WORLD_SIZE", "2"), 2, "train",
            train_out, "train, OMPI_COMM_WORLD_SIZE=2")
    refused([EXE, "train", "-q", train_ini], env_with("PMI_SIZE", "3"), 3, "train",
            train_out, "train, PMI_SIZE=3")

    p = subprocess.run([EXE, "run", "-q", run_ini], capture_output=True, text=True,
                       timeout=120, env=env_with("OMPI_COMM_WORLD_SIZE", "1"))
    if p.returncode != 0 or not os.path.exists(os.path.join(run_out, "rows.csv")):
        fail(f"run, OMPI_COMM_WORLD_SIZE=1: exit {p.returncode}, no rows.csv\n{p.stderr}")
    shutil.rmtree(run_out, ignore_errors=True)

    mpirun = shutil.which("mpirun")
    if os.environ.get("DEFTSIM_MPI") == "1" and mpirun:
        env = env_with(None, None)
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        p = subprocess.run([mpirun, "--oversubscribe", "-n", "2", EXE, "train", "-q", train_ini],
                           capture_output=True, text=True, timeout=120, env=env)
        if p.returncode == 0:
            fail("mpirun -n 2 deftsim train: exit 0, expected a refusal")
        if p.stderr.count("spread mode") < 2 and p.stdout.count("spread mode") < 2:
            fail(f"mpirun -n 2 deftsim train: not refused on both ranks\n{p.stdout}\n{p.stderr}")
        if os.path.exists(train_out):
            fail(f"mpirun -n 2 deftsim train: {train_out} was created")
    else:
        print("no MPI build or no mpirun: the mpirun case skipped")

if failures:
    sys.exit(f"{len(failures)} failures")
print("spread mode: train (and run and sweep without MPI) refused under an MPI launcher")
