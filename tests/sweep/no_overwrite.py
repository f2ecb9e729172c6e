#!/usr/bin/env python3
"""No command replaces another run's results: run, sweep, train, trace gen, trace record and
analyze refuse (exit 2, naming the folder, what it holds and --output) a folder that holds
another kind of results or another scenario's, and leave every byte of it as it was; a rerun of
the same scenario into its own folder still works, and -o/--output writes where asked.

Every refusal is checked against a hash of every file (and the list of folders) of the folder
before and after. Run by meson test (suite fast); DEFTSIM_EXE names the program and
DEFTSIM_SOURCE_ROOT the source tree (deftsim train reads scenarios/train_mlp.ini's data).
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

EXE = os.environ.get("DEFTSIM_EXE")
ROOT = os.environ.get("DEFTSIM_SOURCE_ROOT")
if not EXE or not ROOT:
    sys.exit("DEFTSIM_EXE and DEFTSIM_SOURCE_ROOT must be set (run through meson test)")

TINY = """index,name,shape,numel
0,fc1.weight,32x16,512
1,fc1.bias,32,32
2,fc2.weight,10x32,320
"""

# deftsim train at its smallest (tests/train/test_train_cli.c's settings).
TRAIN = ["--set", "train.train_samples=256", "--set", "train.eval_samples=50",
         "--set", "train.batch_size=8", "--set", "scenario.iterations=2",
         "--set", "train.eval_every=2", "--set", "sparsify.methods=topk",
         "--set", "sparsify.densities=0.01", "--set", "workers.counts=2",
         "--set", "network.simulate=0"]

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def deftsim(*args):
    return subprocess.run([EXE, *args], capture_output=True, text=True, cwd=ROOT)


def ok(*args):
    p = deftsim(*args)
    check(p.returncode == 0, f"deftsim {' '.join(args)}: exit {p.returncode}, want 0\n{p.stderr}")
    return p


def snapshot(folder):
    """Every file's bytes (sha256) and every folder under folder, by relative path."""
    snap = {}
    for d, dirs, files in os.walk(folder):
        rel = os.path.relpath(d, folder)
        snap[rel + "/"] = "dir"
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                snap[os.path.join(rel, f)] = hashlib.sha256(fh.read()).hexdigest()
    return snap


def refused(folder, args, *want):
    """deftsim args must exit 2 with every string of want in its message, folder untouched."""
    before = snapshot(folder)
    p = deftsim(*args)
    what = f"deftsim {' '.join(args)}"
    check(p.returncode == 2, f"{what}: exit {p.returncode}, want 2\n{p.stderr}")
    for w in want:
        check(w in p.stderr, f"{what}: message lacks {w!r}:\n{p.stderr}")
    after = snapshot(folder)
    if after != before:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        check(False, f"{what}: changed {folder}: {changed}")


def main():
    tmp = tempfile.mkdtemp(prefix="deftsim-nooverwrite-")
    try:
        model = os.path.join(tmp, "tiny.csv")
        with open(model, "w") as f:
            f.write(TINY)
        sweep_dir = os.path.join(tmp, "sweep")
        run_dir = os.path.join(tmp, "run")
        default_dir = os.path.join(tmp, "default")
        scen = os.path.join(tmp, "tiny.ini")
        with open(scen, "w") as f:
            f.write(f"""[scenario]
name = tiny
seed = 5
iterations = 2
output = {default_dir}
[gradients]
model = {model}
[sparsify]
methods = deft, topk
densities = 0.05
[workers]
counts = 1, 2
[network]
simulate = 0
""")
        # The scenario file itself names the sweep's folder: the case of the report.
        intruder = os.path.join(tmp, "intruder.ini")
        with open(intruder, "w") as f:
            f.write(open(scen).read().replace("name = tiny", "name = intruder")
                    .replace(f"output = {default_dir}", f"output = {sweep_dir}"))

        ok("sweep", scen, "-q", "-o", sweep_dir)
        check(os.path.exists(os.path.join(sweep_dir, "rows.csv")), "the sweep wrote no rows.csv")

        # run -o writes where asked, and not into [scenario] output.
        ok("run", scen, "-q", "-o", run_dir)
        for f in ["manifest.json", "rows.csv", "points/deft_d0.05_P2.csv"]:
            check(os.path.exists(os.path.join(run_dir, f)), f"run -o wrote no {f}")
        check(not os.path.exists(default_dir), "run -o wrote into [scenario] output too")
        # -o wins over --set scenario.output, whatever their order.
        other = os.path.join(tmp, "other")
        ok("run", scen, "-q", "-o", other, "--set", f"scenario.output={default_dir}")
        check(os.path.exists(os.path.join(other, "rows.csv")) and not os.path.exists(default_dir),
              "run: -o did not win over --set scenario.output")

        # run into a sweep's folder: another scenario (its own output key), the same scenario
        # (the other command), and through --set.
        refused(sweep_dir, ["run", intruder, "-q"], f"deftsim: input error: {sweep_dir}: the "
                "folder holds the points of deftsim sweep, not a run; run into another folder "
                "(--output DIR)")
        refused(sweep_dir, ["run", scen, "-q", "-o", sweep_dir], "points of deftsim sweep",
                "--output DIR")
        refused(sweep_dir, ["run", scen, "-q", "--dry-run", "-o", sweep_dir],
                "points of deftsim sweep")
        # run into another scenario's run.
        refused(run_dir, ["run", scen, "-q", "-o", run_dir, "--set", "scenario.seed=9"],
                f"deftsim: input error: {run_dir} holds the results of another run ([scenario] "
                "seed: 9 here, 5 in the folder); this run would replace them: run into another "
                "folder (--output DIR)")
        refused(run_dir, ["run", scen, "-q", "-o", run_dir, "--set", "sparsify.methods=topk"],
                "[sparsify] methods: [\"topk\"] here, [\"deft\",\"topk\"] in the folder")
        # sweep into a run's folder (no lock file or point folder left behind).
        refused(run_dir, ["sweep", scen, "-q", "-o", run_dir, "--vary", "scenario.seed=1,2"],
                f"{run_dir}: the folder holds the results of deftsim run, not a sweep")
        refused(run_dir, ["sweep", scen, "-q", "-o", run_dir], "results of deftsim run")
        # A rerun of the same scenario replaces its own results, as before; so does a sweep's.
        ok("run", scen, "-q", "-o", run_dir, "--set", "engine.memory_budget=0.7")
        ok("sweep", scen, "-q", "-o", sweep_dir)

        # Point files or rows.csv without a manifest: whose they are cannot be told.
        orphans = os.path.join(tmp, "orphans")
        os.makedirs(os.path.join(orphans, "points"))
        shutil.copy(os.path.join(run_dir, "rows.csv"), orphans)
        refused(orphans, ["run", scen, "-q", "-o", orphans],
                f"{orphans} holds rows.csv but no manifest.json")
        shutil.copy(os.path.join(run_dir, "points", "deft_d0.05_P1.csv"),
                    os.path.join(orphans, "points"))
        refused(orphans, ["run", scen, "-q", "-o", orphans],
                f"{orphans}/points holds point files but no manifest.json")

        # train: into a sweep's and a run's folder, and another scenario's training results.
        train_ini = "scenarios/train_mlp.ini"
        refused(sweep_dir, ["train", train_ini, "-q", "-o", sweep_dir, *TRAIN],
                f"{sweep_dir}: the folder holds the points of deftsim sweep, not a training run; "
                "train into another folder (--output DIR)")
        refused(run_dir, ["train", train_ini, "-q", "--set", f"scenario.output={run_dir}", *TRAIN],
                "the results of deftsim run, not a training run")
        train_dir = os.path.join(tmp, "train")
        ok("train", train_ini, "-q", "-o", train_dir, *TRAIN)
        for f in ["manifest.json", "curves.csv", "final.csv", "points/topk_d0.01_P2.csv"]:
            check(os.path.exists(os.path.join(train_dir, f)), f"train -o wrote no {f}")
        refused(train_dir, ["train", train_ini, "-q", "-o", train_dir, *TRAIN,
                            "--set", "scenario.seed=77"],
                f"{train_dir} holds the results of another training run ([scenario] seed: 77 here")
        refused(train_dir, ["run", scen, "-q", "-o", train_dir], "the results of deftsim train")
        ok("train", train_ini, "-q", "-o", train_dir, *TRAIN)  # the same: replaced

        # trace gen and trace record: into results folders, and over another trace.
        gen = ["trace", "gen", "--model", model, "--workers", "2", "--iterations", "2"]
        refused(sweep_dir, [*gen, "--seed", "1", "-o", sweep_dir],
                f"deftsim: input error: {sweep_dir}: the folder holds the points of deftsim "
                "sweep, not a trace; write the trace into another folder (-o DIR)")
        refused(run_dir, [*gen, "--seed", "1", "-o", run_dir], "the results of deftsim run")
        refused(train_dir, [*gen, "--seed", "1", "-o", train_dir], "the results of deftsim train")
        trace_dir = os.path.join(tmp, "trace")
        ok(*gen, "--seed", "1", "-o", trace_dir)
        refused(trace_dir, [*gen, "--seed", "2", "-o", trace_dir],
                f"{trace_dir} holds another trace (provenance seed: 2 here, 1 in the folder); "
                "this one would replace it: write it into another folder (-o DIR)")
        refused(trace_dir, ["trace", "gen", "--model", model, "--workers", "3", "--iterations",
                            "2", "--seed", "1", "-o", trace_dir], "workers: 3 here, 2 in the folder")
        refused(trace_dir, ["run", scen, "-q", "-o", trace_dir],
                "the folder holds a gradient trace, not a run")
        ok(*gen, "--seed", "1", "-o", trace_dir)  # the same trace again: replaced
        refused(run_dir, ["trace", "record", train_ini, "-q", "-o", run_dir, *TRAIN],
                "the results of deftsim run, not a trace")
        refused(trace_dir, ["trace", "record", train_ini, "-q", "-o", trace_dir, *TRAIN],
                f"{trace_dir} holds another trace (model: fmnist_mlp here, tiny in the folder")

        # analyze: its summary goes beside the results it reads, or into a folder of no results.
        ok("analyze", sweep_dir, "-q")
        refused(run_dir, ["analyze", sweep_dir, "-q", "-o", run_dir],
                f"--output {run_dir}: the folder holds the results of deftsim run, not those of "
                f"{sweep_dir}", "analyze into another folder (--output DIR)")
        refused(trace_dir, ["analyze", sweep_dir, "-q", "-o", trace_dir], "a gradient trace")
        refused(orphans, ["analyze", sweep_dir, "-q", "-o", orphans], "point files")
        ok("analyze", os.path.join(run_dir, "rows.csv"), "-q")  # a FILE: into its folder
        check(os.path.exists(os.path.join(run_dir, "summary.csv")), "analyze FILE: no summary.csv")
        summaries = os.path.join(tmp, "summaries")
        ok("analyze", sweep_dir, "-q", "-o", summaries)
        check(os.path.exists(os.path.join(summaries, "summary.md")), "analyze -o: no summary.md")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} checks failed")
    print("no_overwrite: every refused folder left as it was")


if __name__ == "__main__":
    main()
