#!/usr/bin/env python3
"""conditions.py - every output names its network conditions and where compute was timed
(issue 31; src/engine/conditions.c, docs/ANALYSIS.md "summary.md" and "Figures").

- `deftsim config` names the preset, the library and its algorithm and the network model: NCCL's
  nccl_algorithm for a GPU preset, MPI's allreduce and allgather (and no NCCL) for a plain run,
  and the device profile the phases are charged from;
- `deftsim run` says the same on its first line (stderr); `deftsim bench sim` names NCCL's
  algorithm for an NCCL network, not MPI's;
- `deftsim analyze`: summary.md has the conditions under each series' heading, with the CPU
  model of the manifest's machine facts; `deftsim plot`: every figure (SVG text) has them, the
  line figures' log axis fits the data, and a point summary.csv flags noisy is marked;
- and none of it claims NCCL for an MPI run.

Python 3 standard library only; run by meson as the fast test `analysis_conditions`.
"""
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

EXE = os.environ.get("DEFTSIM_EXE")
if not EXE:
    sys.exit("DEFTSIM_EXE is not set (run through meson test)")
SRC = os.environ.get("DEFTSIM_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
PLOTS = os.path.join(SRC, "plots")

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(*args, ok=True):
    p = subprocess.run([EXE, *args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"deftsim {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    return p


SCENARIO = """[scenario]
seed = 3
output = {out}
iterations = 3
[gradients]
source = synthetic
model = {model}
[sparsify]
methods = deft, topk, dense
densities = 0.01
[workers]
counts = 4, 8
[timing]
repeats = 3
[network]
{network}
"""

GPU = "preset = dgx-h100\nlibrary = nccl\nnccl_algorithm = ring"
GPU_LABEL = "network: preset dgx-h100, NCCL (nccl_algorithm ring"
MPI = "allreduce = ring\nallgather = bruck"
MPI_LABEL = "network: preset none, MPI (allreduce ring, allgather bruck), model LV08"


def svg_text(path):
    """The text of an SVG's <text> elements, joined (gnuplot writes labels as text)."""
    s = open(path).read()
    return " ".join(re.sub(r"<[^>]+>", "", t) for t in re.findall(r"<text[^>]*>.*?</text>", s, re.S))


def main():
    tmp = tempfile.mkdtemp(prefix="deftsim-cond-")
    try:
        model = os.path.join(tmp, "tiny.csv")
        with open(model, "w") as f:
            f.write("index,name,shape,numel\n0,a,200x100,20000\n1,b,20000,20000\n")
        ini = {}
        for name, net in (("gpu", GPU), ("mpi", MPI)):
            ini[name] = os.path.join(tmp, name + ".ini")
            with open(ini[name], "w") as f:
                f.write(SCENARIO.format(out=os.path.join(tmp, name), model=model, network=net))

        # deftsim config: two comment lines, and the INI still reads back. The network model is
        # the preset's (or the default), as the resolved configuration says.
        gpu_model = json.loads(run("config", ini["gpu"], "--json").stdout)["network"]["model"]
        out = run("config", ini["gpu"]).stdout
        check(GPU_LABEL in out and f"model {gpu_model}" in out,
              f"config (gpu) names the network: {out[:300]}")
        check("timed on this machine's CPU" in out and "not on the cluster's GPUs" in out,
              "config (gpu) says the phases are timed on this machine's CPU")
        out = run("config", ini["mpi"]).stdout
        check(MPI_LABEL in out, f"config (mpi) names MPI's algorithms: {out[:300]}")
        check("NCCL" not in out.split("\n[", 1)[0] and "nccl_algorithm ring" not in out.split("\n[", 1)[0],
              "config (mpi) does not claim NCCL")
        prof = os.path.join(SRC, "profiles", "cpu-intel-xeon.csv")
        if os.path.exists(prof):
            out = run("config", ini["gpu"], "--set", "device.kind=profile", "--set",
                      f"device.profile={prof}").stdout
            check("charged from the device profile cpu-intel-xeon.csv" in out,
                  f"config names the device profile: {out[:300]}")

        # bench sim with NCCL: NCCL's algorithm, not MPI's names.
        p = run("bench", "sim", "--model", model, "--P", "8", "--methods", "topk", "--set",
                "network.preset=dgx-h100", "--set", "network.library=nccl", "--set",
                "network.nccl_algorithm=tree", ok=False)
        if p.returncode == 0:
            head = (p.stdout + p.stderr).splitlines()[0]
            check("NCCL (nccl_algorithm tree" in head, f"bench sim header names NCCL's tree: {head}")
            check("allreduce rabenseifner" not in head and "allgather bruck" not in head,
                  f"bench sim header names no MPI algorithm for NCCL: {head}")
        else:
            check(False, f"bench sim failed: {p.stderr[-500:]}")

        for name in ("gpu", "mpi"):
            folder = os.path.join(tmp, name)
            p = run("run", ini[name])
            first = p.stderr.splitlines()[0] if p.stderr else ""
            check(first.startswith("deftsim run: network: "), f"run ({name}) logs the conditions first: {first}")
            run("analyze", folder, "--quiet")
            cpu = json.load(open(os.path.join(folder, "manifest.json")))["machine"]["cpu_model"]
            md = open(os.path.join(folder, "summary.md")).read()
            cond = [l for l in md.splitlines() if l.startswith("Conditions: ")]
            check(len(cond) == 1, f"summary.md ({name}): one Conditions line per series, got {len(cond)}")
            line = cond[0] if cond else ""
            check(f"timed on this machine's CPU ({cpu})" in line,
                  f"summary.md ({name}) names the CPU of the manifest: {line}")
            if name == "gpu":
                check(GPU_LABEL in line and f"model {gpu_model}" in line,
                      f"summary.md (gpu) names the network: {line}")
                check(first.endswith(line[len("Conditions: "):].rstrip(".")),
                      f"run's log and summary.md say the same: {first} / {line}")
            else:
                check(MPI_LABEL in line, f"summary.md (mpi) names MPI's algorithms: {line}")
                check("NCCL" not in md, "summary.md (mpi) does not claim NCCL")
            run("plot", folder, "--format", "svg", "--quiet", "--scripts", PLOTS)
            plots = os.path.join(folder, "plots")
            svgs = sorted(f for f in os.listdir(plots) if f.endswith(".svg"))
            check(len(svgs) >= 8, f"plot ({name}): {len(svgs)} figures")
            for f in svgs:
                t = svg_text(os.path.join(plots, f))
                if name == "gpu":
                    check(GPU_LABEL in t, f"{name}/{f} names the network")
                    check(f"timed on this machine's CPU ({cpu})" in t, f"{name}/{f} names the CPU")
                else:
                    check(MPI_LABEL in t, f"{name}/{f} names MPI's algorithms")
                    check("NCCL" not in t, f"{name}/{f} does not claim NCCL")

        # The log axis of iteration_vs_P fits the data: no labelled tick beyond the bars' range
        # by more than the margin (whole decades would put 1 and 100 around 3 .. 30).
        folder = os.path.join(tmp, "gpu")
        dat = os.path.join(folder, "plots", "data", "iteration_vs_P.dat")
        vals = [float(x) for l in open(dat) if l.strip() and not l.startswith("#")
                for x in l.split()[2:4]]
        lo, hi = min(vals), max(vals)
        svg = open(os.path.join(folder, "plots", "iteration_vs_P.svg")).read()
        ticks = [float(x) for x in re.findall(r">([0-9.]+)</tspan>", svg)]
        yt = [v for v in ticks if v not in (4.0, 8.0)]  # the worker axis's labels
        check(yt and all(lo / 1.25 <= v <= hi * 1.25 for v in yt),
              f"iteration_vs_P: y ticks {yt} outside the data {lo} .. {hi} (x 1.25)")

        # A sweep that varies the library: each series (and its figures) names its own.
        sw = os.path.join(tmp, "sweep")
        run("sweep", ini["mpi"], "--quiet", "--output", sw, "--set", "workers.counts=4", "--set",
            "sparsify.methods=topk", "--vary", "network.library=mpi,nccl")
        run("analyze", sw, "--quiet")
        md = open(os.path.join(sw, "summary.md")).read()
        heads = re.findall(r"^## .*network.library = (\w+)\n\nConditions: ([^\n]*)", md, re.M)
        check(sorted(h[0] for h in heads) == ["mpi", "nccl"], f"sweep summary.md series: {heads}")
        for lib, line in heads:
            check(("NCCL (" in line) == (lib == "nccl") and ("MPI (" in line) == (lib == "mpi"),
                  f"sweep summary.md: the {lib} series says {line}")
        run("plot", sw, "--format", "svg", "--quiet", "--scripts", PLOTS)
        for lib in ("mpi", "nccl"):
            f = next((f for f in os.listdir(os.path.join(sw, "plots"))
                      if f.startswith("comm_vs_P") and f.endswith(f"_{lib}.svg")), None)
            t = svg_text(os.path.join(sw, "plots", f)) if f else ""
            check(("NCCL (" in t) == (lib == "nccl") and ("MPI (" in t) == (lib == "mpi"),
                  f"sweep figure {f} names the {lib} series' library")

        # Noisy points: flagged in summary.csv, marked in the timed figures.
        path = os.path.join(folder, "summary.csv")
        rows = list(csv.DictReader(open(path, newline="")))
        for r in rows:
            r["noisy"] = "1" if (r["method"], r["P"]) == ("topk", "8") else "0"
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
        run("plot", folder, "--format", "svg", "--quiet", "--scripts", PLOTS)
        dat = open(os.path.join(folder, "plots", "data", "select_vs_P.dat")).read()
        block = dat.split("# method topk")[1].split("\n\n\n")[0]
        flags = {l.split()[0]: (l.split() + ["-"] * 5)[4] for l in block.splitlines()
                 if l.strip() and not l.startswith("#")}
        check(flags == {"4": "0", "8": "1"}, f"select_vs_P.dat: topk's noisy column {flags}")
        check("noisy" in svg_text(os.path.join(folder, "plots", "select_vs_P.svg")),
              "select_vs_P.svg has the key entry for noisy points")
        check("noisy" not in svg_text(os.path.join(folder, "plots", "bytes_vs_P.svg")),
              "bytes_vs_P.svg (not timed) marks no noisy point")
        t = svg_text(os.path.join(folder, "plots", "breakdown.svg"))
        check(t.count("(noisy)") == 1, f"breakdown.svg labels the one noisy bar: {t.count('(noisy)')}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("conditions: every output names the network and where compute was timed")


if __name__ == "__main__":
    main()
