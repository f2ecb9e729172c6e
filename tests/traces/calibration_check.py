#!/usr/bin/env python3
"""The shipped calibrated parameter sets against the recorded statistics they ship with
(traces/params/*.validation.csv, written by scripts/calibration-validate.py from the recorded
traces): the statistics each calibration met within 10% are recomputed from fresh synthetic
traces (deftsim trace gen --params SET, 8 workers, the seeds the validation averaged) and must
stay within 10% of the recorded values:

  resnet18_fmnist_p8 (resnet18_cifar10, seeds 1, 2): build-up at P = 4 and 8, DEFT's k_j
      share and norm share of the top 10% of fragments, DEFT's packing imbalance, the
      fraction of tensors whose top-k density exceeds d
  bert_small_pydoc_p8 (tests/traces/bert_small.csv, the recorded model's table; seeds 1, 2, 3):
      build-up at P = 4 and 8, the workers' top-k overlap, DEFT's k_j share and packing
      imbalance, the fraction of tensors whose top-k density exceeds d

A change of the generator or of a parameter set that moves them fails.

Run by `meson test` (suite fast) with DEFTSIM_EXE and DEFTSIM_SOURCE_ROOT set; needs numpy and
safetensors (as tests/traces/interop.py).
"""
import csv
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from safetensors.numpy import load_file
except ImportError as e:
    sys.exit(f"calibration_check: FAIL: {e} (pip install numpy safetensors)")

EXE, ROOT = os.environ.get("DEFTSIM_EXE"), os.environ.get("DEFTSIM_SOURCE_ROOT")
if not EXE or not ROOT:
    sys.exit("calibration_check: FAIL: DEFTSIM_EXE or DEFTSIM_SOURCE_ROOT is not set")
spec = importlib.util.spec_from_file_location(
    "cv", os.path.join(ROOT, "scripts", "calibration-validate.py"))
cv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cv)

SETS = [
    ("resnet18_fmnist_p8", "resnet18_cifar10",
     os.path.join(ROOT, "traces", "models", "resnet18_cifar10.csv"), ("1", "2"),
     ["buildup_P4", "buildup_P8", "deft_kj_top10", "deft_norm_top10", "deft_imbalance",
      "topk_tensors_above_d"]),
    ("bert_small_pydoc_p8", os.path.join(ROOT, "tests", "traces", "bert_small.csv"),
     os.path.join(ROOT, "tests", "traces", "bert_small.csv"), ("1", "2", "3"),
     ["buildup_P4", "buildup_P8", "overlap", "deft_kj_top10", "deft_imbalance",
      "topk_tensors_above_d"]),
]

failures = 0
for name, model, table, seeds, checked in SETS:
    recorded = {}
    with open(os.path.join(ROOT, "traces", "params", name + ".validation.csv")) as f:
        for r in csv.DictReader(f):
            if r["column"] == "recorded":
                recorded[r["statistic"]] = float(r["value"])
    with open(table) as f:
        numels = [int(r["numel"]) for r in csv.DictReader(f)]
    tmp = tempfile.mkdtemp(prefix="deftsim_calcheck_")
    rows = []
    try:
        for seed in seeds:
            out = os.path.join(tmp, "t" + seed)
            subprocess.run([EXE, "trace", "gen", "--model", model, "--workers", "8",
                            "--iterations", "1", "--seed", seed, "--params", name, "-o", out],
                           check=True, capture_output=True)
            t = load_file(os.path.join(out, "iter_000000.safetensors"))
            grads = [t[f"worker.{w:04d}"] for w in range(8)]
            del t
            shutil.rmtree(out)
            rows.append(cv.stats(grads, numels, 0.01))
            del grads
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    got = cv.mean_stats(rows)
    for s in checked:
        err = (got[s] - recorded[s]) / recorded[s]
        ok = abs(err) <= 0.10
        failures += not ok
        print(f"{name:20s} {s:22s} recorded {recorded[s]:.4f} synthetic {got[s]:.4f} "
              f"({100 * err:+.1f}%) {'ok' if ok else 'FAIL: beyond 10%'}")
if failures:
    sys.exit(f"calibration_check: {failures} statistic(s) beyond 10% of the recorded traces")
