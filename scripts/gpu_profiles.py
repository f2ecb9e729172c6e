#!/usr/bin/env python3
"""gpu_profiles.py - the sourced GPU device profiles (docs/KERNELS.md, "GPU profiles from
published sources").

Deterministic, standard library only:

  derive   writes the `derived` rows of profiles/sources/<gpu>.csv from the model below
           (datasheet bandwidth at an achieved fraction, per-call overheads of a PyTorch
           operation or a CUDA launch, each from a published measurement, and the bytes and
           calls each operation takes); rows of kind `published` in the file are kept as they
           are; an operation with published rows at two sizes or more for a profile gets no
           derived ones, one with published rows at a single size keeps them at the bandwidth
           that passes through the published time (calibrated_bandwidth).
  fit      fits every operation's cost model to the source rows of one profile (least squares
           weighted by 1/t^2 over the terms that vary, as deftsim_profile_fit) and writes
           profiles/<gpu>-<flavour>.csv in the format of `deftsim bench kernels --profile`.
  check    exits 1 if the shipped sources or profiles differ from what derive and fit write
           (tests/profile/gpu_profiles_check.py runs it).
  compare  prints, per profile and operation whose fit published rows moved, the fitted time
           at n = 1e6, 1e7, 1e8 (k = 0.01 n and 0.001 n) against the derived-only fit.

Usage: gpu_profiles.py [derive|fit|check|compare] [--root DIR]
"""
import csv
import io
import os
import sys

# ---- The GPUs: datasheet figures, each with its source ----------------------------------------

# L2 sizes (6, 40, 50 MB), with the datasheets' bandwidths, in one published table (Table 3 of
# doi:10.1016/j.ultsonch.2023.106546).
L2_URL = "https://pmc.ncbi.nlm.nih.gov/articles/PMC10448217/table/t0015"

CREATED = "2026-12-03T00:00:00Z"  # when the sources were compiled
# The achieved fraction of the datasheet bandwidth: a memory copy measured on an A100 SXM4
# 40GB, 1355 of its 1555 GB/s (PTsolvers/gpu-workshop-JuliaCon23 issue 7); no such
# measurement was found for the H100 SXM5, which takes the same fraction; the V100 SXM2 has its
# own (GPUS).
FRACTION = 1355.0 / 1555.0
FRACTION_NOTE = ("fraction 1355/1555 = %.3f, a memory copy measured on A100 SXM4 40GB "
                 "(https://github.com/PTsolvers/gpu-workshop-JuliaCon23/issues/7), taken for "
                 "the A100 SXM4 and the H100 SXM5" % FRACTION)
# GPUInspector.jl's device page for a Tesla V100-SXM2-32GB (docs at the commit named in the
# address): a memcpy's and a cuBLAS SAXPY's measured bandwidth.
GPUINSPECTOR_V100_URL = ("https://github.com/pc2/GPUInspector.jl/blob/"
                         "83ce4ac3476e1afe96aa89a6a4e8adb723559087/docs/src/devices/v100_sxm2.md")

GPUS = {
    "v100-sxm2": {
        "gpu": "NVIDIA V100 SXM2",
        "bw": 900e9,
        "bw_url": "https://images.nvidia.com/content/technologies/volta/pdf/"
                  "volta-v100-datasheet-update-us-1165301-r5.pdf",
        "l2": 6 * 2**20,
        "l2_url": L2_URL,
        "l2_note": "the 6 MB L2",
        # A 0.5 GiB device-to-device memcpy on a Tesla V100-SXM2-32GB: 722.31 GiB/s, which the
        # page converts to 775.57 GB/s (GPUInspector.jl's device page, "Memory bandwidth").
        "fraction": 775.57e9 / 900e9,
        "fraction_note": "fraction 775.57/900 = %.3f, a 0.5 GiB memcpy measured at 722.31 GiB/s "
                         "= 775.57 GB/s on a Tesla V100-SXM2-32GB (%s, section Memory bandwidth, "
                         "memory_bandwidth())" % (775.57 / 900.0, GPUINSPECTOR_V100_URL),
    },
    "a100-sxm4": {
        "gpu": "NVIDIA A100 SXM4 40GB",
        "bw": 1555e9,
        "bw_url": "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                  "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
        "l2": 40 * 2**20,
        "l2_url": L2_URL,
        "l2_note": "the 40 MB L2 (the 80GB SXM4 part has 2039 GB/s)",
        "fraction": FRACTION,
        "fraction_note": FRACTION_NOTE,
    },
    "h100-sxm5": {
        "gpu": "NVIDIA H100 SXM5",
        "bw": 3.35e12,
        "bw_url": "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
        "l2": 50 * 2**20,
        "l2_url": L2_URL,
        "l2_note": "the 50 MB L2",
        # No memory copy measured on an H100 SXM5 was found: the A100's fraction.
        "fraction": FRACTION,
        "fraction_note": FRACTION_NOTE + " (no H100 SXM5 figure found)",
    },
}

# Per-call overheads: a raw cuLaunchKernel, 3.0 us (GB200, meta-pytorch/tritonbench PR 1017);
# a PyTorch operation, about 7 us of framework overhead (pytorch/pytorch issue 41383) plus
# that launch.
LAUNCH_US = 3.0
LAUNCH_URL = "https://github.com/meta-pytorch/tritonbench/pull/1017"
TORCH_OP_US = 7.0
TORCH_OP_URL = "https://github.com/pytorch/pytorch/issues/41383"

# ---- The two flavours: what runs each operation, and the stated per-call overhead -------------
#
# Per operation: (calls, per_segment_calls, bytes_per_n, bytes_per_k, what). calls and
# per_segment_calls count PyTorch eager operations (torch) or CUDA kernel launches (best), each
# charged the flavour's overhead; bytes per element n and per entry k are the DRAM traffic.

FLAVOURS = {
    "torch": {
        "library": "pytorch",
        "overhead_us": TORCH_OP_US + LAUNCH_US,
        "overhead_note": "%g us per PyTorch eager operation: %g us framework overhead (%s) + "
                         "%g us cuLaunchKernel (%s)" % (TORCH_OP_US + LAUNCH_US, TORCH_OP_US,
                                                       TORCH_OP_URL, LAUNCH_US, LAUNCH_URL),
        "title": "PyTorch eager operations, as the sparsifiers' authors ran them",
        "unit": "PyTorch operation",
        "ops": {
            "absmax": (2, 0, 12, 0, "x.abs().max(): abs reads and writes 4n, max reads 4n"),
            "topk": (3, 0, 28, 12, "torch.topk(x.abs(), k): abs 8n; radix select, 4 passes of "
                     "8 bits over 4n, a gather pass 4n, counted as 2 operations; values fp32 + "
                     "indices int64 12k"),
            "segtopk": (0, 3, 28, 12, "a loop over fragments, torch.topk(x[a:b].abs(), k_j) "
                        "each: 3 operations per fragment; bytes as topk"),
            "seg_norms": (0, 1, 4, 0, "a loop over fragments, torch.norm(x[a:b]) each: 1 "
                          "operation per fragment, reads 4n"),
            "filter_ge": (4, 0, 15, 8, "(x.abs() >= thr).nonzero(): abs 8n, ge 5n, nonzero "
                          "(count, host sync, write) 2 operations reading 2n, int64 indices 8k"),
            "count_ge": (3, 0, 14, 0, "(x.abs() >= thr).sum(): abs 8n, ge 5n, sum n"),
            "sample_strided": (2, 0, 0, 40, "x[::s].abs() made contiguous: one sector per "
                               "sample 32k, abs 8k"),
            "sample_random": (3, 0, 0, 60, "torch.randint + x[idx] + abs: 8k + 8k + 32k + 4k "
                              "+ 8k"),
            "gather": (1, 0, 0, 44, "x[idx]: int64 indices 8k, one sector per entry 32k, "
                       "values 4k"),
            "zero_at": (1, 0, 0, 40, "x[idx] = 0: int64 indices 8k, one sector per entry 32k"),
            "scatter_add": (1, 0, 0, 76, "x.index_add_(0, idx, v): indices 8k, values 4k, "
                            "read and write a sector per entry 64k"),
            "union": (5, 0, 3, 64, "torch.cat of the lists 16k, a bool mask of n (zeros n), "
                      "mask[idx] = True 8k + 32k, mask.nonzero() 2 operations reading 2n, "
                      "int64 output 8k"),
            "merge_topk": (6, 0, 52, 56, "cat of indices and values 24n, torch.topk(v.abs(), "
                           "k) over the n = na + nb entries 28n + 12k, indices gathered 44k"),
            "accumulate": (1, 0, 12, 0, "acc = residual + g: reads 8n, writes 4n"),
        },
    },
    "best": {
        "library": "best published GPU kernels",
        "overhead_us": LAUNCH_US,
        "overhead_note": "%g us per CUDA kernel launch: cuLaunchKernel measured on GB200 (%s)"
                         % (LAUNCH_US, LAUNCH_URL),
        "title": "the fastest published GPU top-k and filters",
        "unit": "kernel launch",
        "ops": {
            "absmax": (2, 0, 4, 0, "CUB DeviceReduce over |x| (transform iterator): 2 "
                       "launches, reads 4n"),
            "topk": (4, 0, 4, 8, "AIR top-k (RAFT/cuVS select_k, radix 11 bits, Zhang et al. "
                     "SC'23): 3 passes and a last filter, 4 launches; the adaptive passes read "
                     "4n once, later passes only the candidates (neglected); fp32 values + "
                     "uint32 indices 8k"),
            "segtopk": (4, 0, 4, 8, "one batched top-k over all fragments (CUB "
                        "DeviceBatchedTopK / select_k over segments): as topk, no cost per "
                        "fragment"),
            "seg_norms": (1, 0, 4, 0, "one segmented reduction (CUB DeviceSegmentedReduce, "
                          "torch._foreach_norm): reads 4n"),
            "filter_ge": (2, 0, 4, 4, "CUB DeviceSelect::If with |x| >= thr: 2 launches, "
                          "reads 4n, uint32 indices 4k"),
            "count_ge": (2, 0, 4, 0, "CUB DeviceReduce counting |x| >= thr: reads 4n"),
            "sample_strided": (1, 0, 0, 36, "one kernel: a sector per sample 32k, writes 4k"),
            "sample_random": (1, 0, 0, 36, "one kernel, counter-based RNG inside: 32k + 4k"),
            "gather": (1, 0, 0, 40, "uint32 indices 4k, a sector per entry 32k, values 4k"),
            "zero_at": (1, 0, 0, 36, "uint32 indices 4k, a sector per entry 32k"),
            "scatter_add": (1, 0, 0, 72, "atomicAdd: indices 4k, values 4k, read and write a "
                            "sector per entry 64k"),
            "union": (4, 0, 0.25, 72, "a bitmap of n bits: clear n/8, atomicOr per entry 4k "
                      "+ 64k, compaction reading n/8 and writing 4k"),
            "merge_topk": (5, 0, 4, 44, "AIR top-k over the na + nb values read in place 4n + "
                           "8k, then their indices gathered 4k + 32k"),
            "accumulate": (1, 0, 12, 0, "fused acc = residual + g: reads 8n, writes 4n"),
        },
    },
}

OPS = ["absmax", "topk", "segtopk", "seg_norms", "filter_ge", "count_ge", "sample_strided",
       "sample_random", "gather", "zero_at", "scatter_add", "union", "merge_topk", "accumulate"]

COLUMNS = ["profile", "op", "n", "k", "segs", "dtype", "time_us", "kind", "gpu", "library",
           "version", "url", "notes"]

# ---- The sizes of the derived rows (as `deftsim bench kernels --profile` measures) ---------------

R18 = 11173962  # ResNet-18's elements
NS = [65536, 262144, 1048576, 4194304, R18, 16777216]
# ResNet-18's DEFT fragments at P = 2, 16, 128, 1024 (docs/KERNELS.md: 62, 122, ... 18,476)
SEG_CASES = [(R18, 62), (R18, 122), (R18, 1151), (R18, 18476), (R18 // 4, 31), (R18 // 32, 577)]
MS = [1000, 10000, 100000, 1000000, 4000000]


def sizes(op):
    """(n, k, segs) of every derived row of op."""
    if op in ("topk", "filter_ge"):
        return [(n, max(1, int(n * d)), 0) for n in NS for d in (0.001, 0.01, 0.1)]
    if op in ("absmax", "count_ge", "accumulate"):
        return [(n, 0, 0) for n in NS]
    if op in ("segtopk", "seg_norms"):
        if op == "seg_norms":
            return [(n, 0, s) for n, s in SEG_CASES]
        return [(n, int(n * d), s) for n, s in SEG_CASES for d in (0.001, 0.01)]
    if op in ("sample_strided", "sample_random", "gather", "zero_at", "scatter_add"):
        return [(16777216, m, 0) for m in MS]
    if op == "union":
        return [(u, lists * int(u * 0.01), lists) for u in (1048576, R18) for lists in (2, 8, 32)]
    if op == "merge_topk":
        return [(2 * m, m // d, 0) for m in (1000, 10000, 100000, 1000000) for d in (1, 10)]
    raise ValueError(op)


def calibrated_bandwidth(gpu_key, flavour, op, pub):
    """The bandwidth that puts the derived model of op through its one published size: the
    published rows' mean time less the stated per-call overheads, over the op's bytes. None
    when the overheads alone exceed the published time or the op moves no bytes there."""
    fl = FLAVOURS[flavour]
    calls, per_seg, bn, bk, _ = fl["ops"][op]
    n, k, segs = int(pub[0]["n"]), int(pub[0]["k"]), int(pub[0]["segs"])
    t = sum(float(r["time_us"]) for r in pub) / len(pub) * 1e-6
    stream = t - (calls + per_seg * segs) * fl["overhead_us"] * 1e-6
    nbytes = bn * n + bk * k
    if stream <= 0 or nbytes <= 0:
        return None
    return nbytes / stream


def derive_rows(gpu_key, published=()):
    """The derived rows of one GPU. `published`: its published source rows. A (profile, op)
    whose published rows cover two sizes or more gets no derived rows (the published rows
    alone are fitted); one whose published rows share one size keeps its derived rows, at the
    bandwidth that puts them through the published time (calibrated_bandwidth), so the fit
    passes through the published figure and still scales with the sizes."""
    g = GPUS[gpu_key]
    groups = {}
    for r in published:
        groups.setdefault((r["profile"], r["op"]), []).append(r)
    rows = []
    for flavour, fl in FLAVOURS.items():
        L = fl["overhead_us"]
        for op in OPS:
            name = "%s-%s" % (gpu_key, flavour)
            pub = groups.get((name, op), [])
            bw, bw_note = g["fraction"] * g["bw"], g["fraction_note"]
            if len({(r["n"], r["k"], r["segs"]) for r in pub}) >= 2:
                continue
            if pub:
                bw = calibrated_bandwidth(gpu_key, flavour, op, pub)
                if bw is None:
                    raise SystemExit("%s, %s: the stated overheads exceed the published time; "
                                     "give a second size" % (name, op))
                bw_note = ("achieved fraction %.3f, calibrated so that this model passes "
                           "through the published row at n = %s, k = %s (%s)"
                           % (bw / g["bw"], pub[0]["n"], pub[0]["k"], pub[0]["url"]))
            calls, per_seg, bn, bk, what = fl["ops"][op]
            for n, k, segs in sizes(op):
                t_us = (calls + per_seg * segs) * L + (bn * n + bk * k) / bw * 1e6
                notes = ("derived: %s; bandwidth %g GB/s (datasheet, url) at %s; %s; %g "
                         "overheads per call + %g per fragment; %g bytes per n, %g per k"
                         % (what, g["bw"] / 1e9, bw_note, fl["overhead_note"], calls,
                            per_seg, bn, bk))
                rows.append({"profile": name, "op": op, "n": str(n),
                             "k": str(k), "segs": str(segs), "dtype": "float32",
                             "time_us": fmt(t_us), "kind": "derived", "gpu": g["gpu"],
                             "library": fl["library"], "version": "-", "url": g["bw_url"],
                             "notes": notes})
    return rows


# ---- Number formatting, as deftsim_csv_double ----------------------------------------------------

def fmt(v):
    if v == 0:
        return "0"
    for prec in (15, 16, 17):
        s = "%.*g" % (prec, v)
        if prec == 17 or float(s) == v:
            return s
    return s


def csv_field(s):
    if any(c in s for c in ',"\r\n'):
        return '"' + s.replace('"', '""') + '"'
    return s


# ---- The fit (deftsim_profile_fit's rule on the terms 1, n, k, segs) ---------------------------

def solve(a, b):
    """Gaussian elimination with partial pivoting; None if singular."""
    m = len(b)
    a = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(m):
        p = max(range(c, m), key=lambda r: abs(a[r][c]))
        if abs(a[p][c]) < 1e-300:
            return None
        a[c], a[p] = a[p], a[c]
        for r in range(m):
            if r != c:
                f = a[r][c] / a[c][c]
                for j in range(c, m + 1):
                    a[r][j] -= f * a[c][j]
    return [a[i][m] / a[i][i] for i in range(m)]


def fit(samples):
    """samples: [(n, k, segs, seconds)]. Returns coef[4] for the terms 1, n, k, segs."""
    xs = [(1.0, float(n), float(k), float(s)) for n, k, s, _ in samples]
    use = [True] + [len({x[j] for x in xs}) > 1 for j in (1, 2, 3)]
    while True:
        idx = [j for j in range(4) if use[j]]
        scale = [max(abs(x[j]) for x in xs) or 1.0 for j in idx]
        ata = [[0.0] * len(idx) for _ in idx]
        atb = [0.0] * len(idx)
        for x, (_, _, _, t) in zip(xs, samples):
            w = 1.0 / (t * t)
            v = [x[j] / s for j, s in zip(idx, scale)]
            for a in range(len(idx)):
                atb[a] += w * v[a] * t
                for b in range(len(idx)):
                    ata[a][b] += w * v[a] * v[b]
        sol = solve(ata, atb)
        if sol is None:
            use[idx[-1]] = False
            continue
        coef = [0.0] * 4
        for j, s, c in zip(idx, scale, sol):
            coef[j] = c / s
        # Terms that contribute less than 1e-9 of every row's time are rounding noise of an
        # exact fit: zero.
        for j in idx:
            if all(abs(coef[j] * x[j]) <= 1e-9 * t for x, (_, _, _, t) in zip(xs, samples)):
                coef[j] = 0.0
        neg = [j for j in idx if coef[j] < 0]
        if not neg or len(idx) == 1:
            return [max(c, 0.0) for c in coef]
        use[min(neg, key=lambda j: coef[j] * max(x[j] for x in xs))] = False


def predict(coef, n, k, s):
    return max(0.0, coef[0] + coef[1] * n + coef[2] * k + coef[3] * s)


# ---- Files ----------------------------------------------------------------------------------------

def sources_path(root, gpu_key):
    return os.path.join(root, "profiles", "sources", gpu_key + ".csv")


def read_sources(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for i, r in enumerate(rows, start=2):
        for c in COLUMNS:
            if c not in r or r[c] is None:
                raise SystemExit("%s:%d: no column %s" % (path, i, c))
        if r["kind"] not in ("published", "derived"):
            raise SystemExit("%s:%d: kind '%s' (published or derived)" % (path, i, r["kind"]))
        if r["op"] not in OPS:
            raise SystemExit("%s:%d: unknown operation '%s'" % (path, i, r["op"]))
        if not r["url"].startswith("https://"):
            raise SystemExit("%s:%d: url '%s' is not a https address" % (path, i, r["url"]))
        if not (float(r["time_us"]) > 0):
            raise SystemExit("%s:%d: time_us '%s' must be > 0" % (path, i, r["time_us"]))
    return rows


def sources_text(rows):
    out = io.StringIO()
    out.write(",".join(COLUMNS) + "\n")
    for r in rows:
        out.write(",".join(csv_field(r[c]) for c in COLUMNS) + "\n")
    return out.getvalue()


def derived_sources_text(root, gpu_key):
    """The sources file as `derive` writes it: published rows kept, derived rows rewritten."""
    path = sources_path(root, gpu_key)
    kept = [r for r in read_sources(path) if r["kind"] == "published"] if os.path.exists(path) else []
    return sources_text(kept + derive_rows(gpu_key, kept))


def profile_text(root, gpu_key, flavour):
    g, fl = GPUS[gpu_key], FLAVOURS[flavour]
    name = "%s-%s" % (gpu_key, flavour)
    rel = "profiles/sources/%s.csv" % gpu_key
    rows = [r for r in read_sources(sources_path(root, gpu_key)) if r["profile"] == name]
    npub = sum(r["kind"] == "published" for r in rows)
    lines = ["format,deftsim-profile,1",
             "device," + csv_field("%s (%s)" % (g["gpu"], fl["title"])),
             "backend,cuda", "isa,-", "threads,1",
             "cache_bytes," + fmt(float(g["l2"])),
             "created," + CREATED,
             "deftsim,scripts/gpu_profiles.py",
             "conditions," + csv_field(
                 "not measured: fitted to the rows of %s for this profile (each row names "
                 "its source); derived rows: datasheet bandwidth %g GB/s (%s) at fraction "
                 "%.3f (an operation with published rows at one size: the fraction that "
                 "passes through them), %g us per %s; cache_bytes: %s"
                 % (rel, g["bw"] / 1e9, g["bw_url"], g["fraction"], fl["overhead_us"],
                    fl["unit"], g["l2_note"])),
             "source," + csv_field("%s: %d rows (%d published, %d derived), profile %s; L2 "
                                   "size: %s" % (rel, len(rows), npub, len(rows) - npub, name,
                                                 g["l2_url"])),
             "op,intercept_s,per_n_s,per_k_s,per_seg_s,per_n_dram_s,per_k_dram_s,cases,"
             "max_rel_err"]
    for op in OPS:
        samples = [(int(r["n"]), int(r["k"]), int(r["segs"]), float(r["time_us"]) * 1e-6)
                   for r in rows if r["op"] == op]
        if not samples:
            continue  # no source: the profile has no row, and a run that needs it is refused
        c = fit(samples)
        err = max(abs(predict(c, n, k, s) - t) / t for n, k, s, t in samples)
        lines.append("%s,%s,%s,%s,%s,0,0,%d,%.4f" % (op, fmt(c[0]), fmt(c[1]), fmt(c[2]),
                                                     fmt(c[3]), len(samples), err))
    return "\n".join(lines) + "\n"


def fitted(rows, name, op):
    samples = [(int(r["n"]), int(r["k"]), int(r["segs"]), float(r["time_us"]) * 1e-6)
               for r in rows if r["profile"] == name and r["op"] == op]
    return fit(samples) if samples else None


def compare_text(root):
    """Per profile and operation: the fitted time at n = 1e6, 1e7, 1e8 (k = 0.01 n and
    0.001 n, no fragments), from the shipped sources against the derived-only fit (the rows
    derive writes when the sources hold no published row), as a Markdown table; operations
    whose fit did not move are left out."""
    cases = [(n, d) for n in (10**6, 10**7, 10**8) for d in (0.01, 0.001)]
    head = ("| profile | op | published rows | " + " | ".join(
        "n = 1e%d, k = %g n" % (len(str(n)) - 1, d) for n, d in cases) + " |")
    lines = [head, "|" + "---|" * (3 + len(cases))]
    for gpu_key in GPUS:
        rows = read_sources(sources_path(root, gpu_key))
        base = derive_rows(gpu_key, ())
        for flavour in FLAVOURS:
            name = "%s-%s" % (gpu_key, flavour)
            for op in OPS:
                c, c0 = fitted(rows, name, op), fitted(base, name, op)
                if c is None or c0 is None or c == c0:
                    continue
                npub = sum(r["profile"] == name and r["op"] == op and r["kind"] == "published"
                           for r in rows)
                cells = []
                for n, d in cases:
                    k = int(n * d)
                    t, t0 = predict(c, n, k, 0), predict(c0, n, k, 0)
                    cells.append("%.4g ms (%.4g; x%.2f)" % (t * 1e3, t0 * 1e3, t / t0))
                lines.append("| %s | %s | %d | %s |" % (name, op, npub, " | ".join(cells)))
    return "\n".join(lines) + "\n"


def outputs(root):
    """Every file the script writes: (path, text), sources first."""
    out = []
    for gpu_key in GPUS:
        out.append((sources_path(root, gpu_key), derived_sources_text(root, gpu_key)))
    return out


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = argv[1:]
    if "--root" in args:
        i = args.index("--root")
        root = args[i + 1]
        del args[i:i + 2]
    cmd = args[0] if args else "fit"
    if cmd == "compare":
        sys.stdout.write(compare_text(root))
        return 0
    if cmd not in ("derive", "fit", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    bad = 0
    if cmd in ("derive", "check"):
        for path, text in outputs(root):
            if cmd == "derive":
                write(path, text)
            elif not os.path.exists(path) or open(path, newline="").read() != text:
                print("differs from what `gpu_profiles.py derive` writes: %s" % path)
                bad += 1
    if cmd in ("fit", "check"):
        for gpu_key in GPUS:
            for flavour in FLAVOURS:
                path = os.path.join(root, "profiles", "%s-%s.csv" % (gpu_key, flavour))
                text = profile_text(root, gpu_key, flavour)
                if cmd == "fit":
                    write(path, text)
                elif not os.path.exists(path) or open(path, newline="").read() != text:
                    print("differs from what `gpu_profiles.py fit` writes from the sources: %s"
                          % path)
                    bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
