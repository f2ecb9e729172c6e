#!/usr/bin/env python3
"""Times torch.topk on the inputs bench_gpu wrote and prints one table beside bench_gpu's rows.

    torch_topk.py --dir DIR [--reps N] [--out FILE]

DIR holds what `bench_gpu --dump DIR` wrote (cases.csv and the raw float32 inputs) and
bench_gpu's CSV output saved as DIR/ours.csv. For every top-k case the same bytes are loaded
onto the GPU and torch.topk is timed twice: on |x| computed beforehand (the selection alone,
the comparison the targets use) and with the abs included (what a caller of torch pays for a
magnitude top-k). Timing follows bench_gpu: CUDA events around each call, calls queued in
batches behind torch.cuda._sleep so that they run back to back, median after a warm-up.
Segmented top-k has no torch counterpart; its torch columns stay empty.

Without PyTorch or a GPU the table is printed with empty torch columns.
"""
import argparse
import csv
import os
import statistics
import sys


def time_device(torch, fn, reps, batch=8):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    while len(times) < reps:
        b = min(batch, reps - len(times))
        torch.cuda._sleep(10_000_000)  # about 5 ms: the batch is queued before it runs
        evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
               for _ in range(b)]
        for s, e in evs:
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        times += [s.elapsed_time(e) * 1e3 for s, e in evs]
    return statistics.median(times), min(times)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--reps", type=int, default=64)
    ap.add_argument("--out", default=None, help="also write the table (markdown) here")
    a = ap.parse_args()

    ours = {r["case"]: r for r in read_csv(os.path.join(a.dir, "ours.csv"))}
    cases = read_csv(os.path.join(a.dir, "cases.csv"))

    device = "torch not available"
    timed = {}
    try:
        import numpy as np
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device for torch")
        device = "%s, torch %s" % (torch.cuda.get_device_name(0), torch.__version__)
        loaded = {}
        for c in cases:
            if c["kind"] != "topk":
                continue
            k = int(c["k"])
            if c["data"] not in loaded:
                loaded.clear()  # one input on the device at a time
                x = np.fromfile(os.path.join(a.dir, c["data"] + ".f32"), dtype=np.float32)
                assert x.size == int(c["n"]), "input size differs from cases.csv"
                loaded[c["data"]] = torch.from_numpy(x).cuda()
            x = loaded[c["data"]]
            ax = x.abs()
            sel = time_device(torch, lambda: torch.topk(ax, k, sorted=False), a.reps)
            withabs = time_device(torch, lambda: torch.topk(x.abs(), k, sorted=False), a.reps)
            timed[c["case"]] = (sel, withabs)
            del ax
            print("torch: %s done" % c["case"], file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - any failure leaves the torch columns empty
        device = "torch.topk not timed: %s" % e

    head = ["case", "n", "k", "fragments", "ours (us)", "copy (us)", "floor = copy/2 (us)",
            "ratio", "target", "torch.topk on abs (us)", "torch abs+topk (us)",
            "speedup vs torch.topk", "verified"]
    rows = []
    notes = []
    for name, r in ours.items():
        t = timed.get(name)
        kern = float(r["kernel_us"])
        sp = "%.1f" % (t[0][0] / kern) if t else "-"
        rows.append([name, r["n"], r["k"], r["fragments"], "%.1f" % kern, "%.1f" % float(r["copy_us"]),
                     "%.1f" % float(r["floor_us"]), "%.2f" % float(r["ratio"]),
                     ("<= %s: %s" % (r["target_ratio"], r["target_met"])) if r["target_met"] != "-" else "-",
                     "%.1f" % t[0][0] if t else "-", "%.1f" % t[1][0] if t else "-", sp, r["verified"]])
        if name == "topk-1e8-d0.01-normal" and t:
            notes.append("exact top-k, n = 1e8, density 0.01: %.2f x the one-read floor (target <= 2), "
                         "%.1f x faster than torch.topk (target >= 3)" % (float(r["ratio"]), t[0][0] / kern))
        if name.startswith("segtopk-r18-P") and name.endswith("normal"):
            notes.append("%s: %.2f x the one-read floor (target <= 3)" % (name, float(r["ratio"])))
    lines = ["GPU: %s" % device, "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += [""] + ["- " + n for n in notes]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
