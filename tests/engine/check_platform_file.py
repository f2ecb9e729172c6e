#!/usr/bin/env python3
"""check_platform_file.py - a user's platform file ([network] topology = file) is recorded as it
is, in every folder that simulates on it.

A small SimGrid cluster (10 Gb/s, 5 us links and a 40 Gb/s backbone), in a file whose name
needs CSV quoting, runs through the deftsim executable (DEFTSIM_EXE):

- deftsim run: every row names the file in net_topology ("file:<name>") and leaves
  net_bandwidth and net_latency empty (no default 25 Gb/s / 1 us); the manifest's "platform"
  holds the file's name, path, size and SHA-256 (computed here with hashlib); the folder's
  copy under platforms/ has the file's bytes; no generated platforms/P<P>.xml is written;
- deftsim analyze: summary.md names the file and quotes no link figures;
- deftsim sweep, with and without an axis: each variant's manifest entry records the file and
  its copy lies where the entry says;
- deftsim train: the manifest records the file and the folder keeps its copy.
"""
import csv
import hashlib
import json
import os
import subprocess
import sys
import tempfile

NAME = "lab,10g.xml"
PLATFORM = """<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <zone id="lab" routing="Full">
    <cluster id="c" prefix="node-" suffix="" radical="0-3" speed="1Gf"
             bw="10Gbps" lat="5us" bb_bw="40Gbps" bb_lat="0us"/>
  </zone>
</platform>
"""
MODEL = """index,name,shape,numel
0,fc1.weight,64x32,2048
1,fc1.bias,64,64
2,fc2.weight,10x64,640
3,fc2.bias,10,10
"""
# What the defaults would print: 25 Gb/s and 1 us in bytes/s and seconds, and in summary.md.
DEFAULT_FIGURES = ["3.125e+09", "3125000000", "25Gbps", "25 Gb/s", "(1 us)"]

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def fail(msg):
    sys.exit(f"check_platform_file.py: {msg}")


def deftsim(exe, args, cwd=None):
    r = subprocess.run([exe] + args, capture_output=True, text=True, cwd=cwd)
    if r.returncode != 0:
        fail(f"deftsim {' '.join(args)} exited {r.returncode}: {r.stderr}")
    return r


def expect_record(rec, where, platform, copy):
    """A manifest's platform record against the file itself."""
    data = open(platform, "rb").read()
    want = {"file": NAME, "path": platform, "copy": copy, "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}
    check(rec == want, f"{where}: platform {rec!r}, expected {want!r}")


def expect_copy(folder, copy, platform, where):
    path = os.path.join(folder, copy)
    if not os.path.isfile(path):
        failures.append(f"{where}: no copy at {path}")
        return
    check(open(path, "rb").read() == open(platform, "rb").read(),
          f"{where}: {path} differs from {platform}")


def expect_rows(path):
    """Every row of a rows file: the file named, the link figures empty, every field there."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    check(len(rows) > 1, f"{path}: no rows")
    col = {c: i for i, c in enumerate(header)}
    for i, r in enumerate(rows[1:], 2):
        if len(r) != len(header):
            failures.append(f"{path}:{i}: {len(r)} fields, the header has {len(header)}")
            return
        got = (r[col["net_topology"]], r[col["net_bandwidth"]], r[col["net_latency"]],
               r[col["sim_mode"]])
        if got != ("file:" + NAME, "", "", "exact"):
            failures.append(f"{path}:{i}: net_topology, net_bandwidth, net_latency, sim_mode = "
                            f"{got}, expected ('file:{NAME}', '', '', 'exact')")
            return
        if not r[col["iteration_seconds"]]:
            failures.append(f"{path}:{i}: no simulated iteration time")
            return
    text = open(path).read()
    for fig in ("3.125e+09", "3125000000", "1e-06"):
        check(f",{fig}," not in text, f"{path}: a cell holds the default figure {fig}")


def main():
    exe = os.environ.get("DEFTSIM_EXE")
    root = os.environ.get("DEFTSIM_SOURCE_ROOT")
    if not exe or not root:
        fail("DEFTSIM_EXE and DEFTSIM_SOURCE_ROOT must be set (run through meson test)")
    with tempfile.TemporaryDirectory(prefix="deftsim-platform-") as tmp:
        os.mkdir(os.path.join(tmp, "mine"))
        platform = os.path.join(tmp, "mine", NAME)
        with open(platform, "w") as f:
            f.write(PLATFORM)
        model = os.path.join(tmp, "tiny.csv")
        with open(model, "w") as f:
            f.write(MODEL)
        ini = os.path.join(tmp, "lab.ini")
        with open(ini, "w") as f:
            f.write("[scenario]\nname = lab\nseed = 2\niterations = 2\n"
                    f"output = {tmp}/run\n"
                    f"[gradients]\nmodel = {model}\n"
                    "[sparsify]\nmethods = deft, topk, dense\ndensities = 0.01\n"
                    "[workers]\ncounts = 2, 4\n"
                    f"[network]\ntopology = file\nplatform_file = {platform}\n")

        # deftsim run, then deftsim analyze.
        run = os.path.join(tmp, "run")
        deftsim(exe, ["run", ini, "--quiet"])
        expect_rows(os.path.join(run, "rows.csv"))
        for p in sorted(os.listdir(os.path.join(run, "points"))):
            expect_rows(os.path.join(run, "points", p))
        m = json.load(open(os.path.join(run, "manifest.json")))
        check(m.get("status") == "complete", f"run: status {m.get('status')}")
        expect_record(m.get("platform"), "run manifest", platform, "platforms/" + NAME)
        net = m.get("config", {}).get("network", {})
        for key in ("topology_params", "bandwidth", "latency", "backbone_bandwidth"):
            check(key in net and net[key] is None,
                  f"run manifest: config.network.{key} = {net.get(key)!r}, expected null "
                  "(a generated platform's key, unused with a platform file)")
        expect_copy(run, "platforms/" + NAME, platform, "run")
        pdir = os.path.join(run, "platforms")
        held = sorted(os.listdir(pdir)) if os.path.isdir(pdir) else []
        check(held == [NAME], f"run: platforms/ holds {held}, expected the file's copy alone")
        deftsim(exe, ["analyze", run])
        md = open(os.path.join(run, "summary.md")).read()
        check(f"`{NAME}`" in md, f"summary.md does not name `{NAME}`")
        check(f"file:{NAME}" in md, f"summary.md does not give net_topology file:{NAME}")
        for fig in DEFAULT_FIGURES:
            check(fig not in md, f"summary.md quotes the default link figure '{fig}'")

        # deftsim sweep without axes: the run's layout; with an axis: one copy per variant.
        sweep = os.path.join(tmp, "sweep")
        deftsim(exe, ["sweep", ini, "--output", sweep, "--progress", "lines"])
        m = json.load(open(os.path.join(sweep, "manifest.json")))
        check(len(m["variants"]) == 1, f"sweep: {len(m['variants'])} variants")
        expect_record(m["variants"][0].get("platform"), "sweep manifest", platform,
                      "platforms/" + NAME)
        expect_copy(sweep, "platforms/" + NAME, platform, "sweep")
        expect_rows(os.path.join(sweep, "rows.csv"))
        # Resuming that sweep after the file was edited is refused: two networks in one folder.
        before = {p: open(os.path.join(sweep, p), "rb").read()
                  for p in ("manifest.json", "rows.csv")}
        with open(platform, "a") as f:
            f.write("<!-- edited -->\n")
        r = subprocess.run([exe, "sweep", ini, "--output", sweep, "--progress", "lines"],
                           capture_output=True, text=True)
        check(r.returncode == 2 and "platform file's content differs" in r.stderr,
              f"sweep resumed over an edited platform file: exit {r.returncode}: {r.stderr}")
        check(all(open(os.path.join(sweep, p), "rb").read() == b for p, b in before.items()),
              "sweep over an edited platform file changed the folder")
        with open(platform, "w") as f:
            f.write(PLATFORM)
        axes = os.path.join(tmp, "axes")
        deftsim(exe, ["sweep", ini, "--output", axes, "--vary", "network.model=CM02,LV08",
                      "--progress", "lines"])
        m = json.load(open(os.path.join(axes, "manifest.json")))
        check([v["label"] for v in m["variants"]] == ["CM02", "LV08"],
              f"sweep with an axis: variants {[v['label'] for v in m['variants']]}")
        for v in m["variants"]:
            copy = f"points/{v['label']}/platforms/{NAME}"
            expect_record(v.get("platform"), f"sweep variant {v['label']}", platform, copy)
            expect_copy(axes, copy, platform, f"sweep variant {v['label']}")

        # deftsim train (a few iterations of the MLP on the shipped data).
        train = os.path.join(tmp, "train")
        sets = ["scenario.output=" + train, "train.train_samples=256", "train.eval_samples=64",
                "train.batch_size=8", "scenario.iterations=2", "train.eval_every=2",
                "sparsify.methods=topk", "sparsify.densities=0.01", "workers.counts=2",
                "network.topology=file", "network.platform_file=" + platform]
        args = ["train", "scenarios/train_mlp.ini", "-q"]
        for s in sets:
            args += ["--set", s]
        deftsim(exe, args, cwd=root)
        m = json.load(open(os.path.join(train, "manifest.json")))
        expect_record(m.get("platform"), "train manifest", platform, "platforms/" + NAME)
        expect_copy(train, "platforms/" + NAME, platform, "train")

    if failures:
        for f in failures:
            print("check_platform_file.py: " + f, file=sys.stderr)
        sys.exit(1)
    print("check_platform_file.py: run, analyze, sweep (with and without an axis) and train "
          "record the platform file")


if __name__ == "__main__":
    main()
