#!/usr/bin/env bash
# The GPU checks in one script, for a machine with an NVIDIA GPU, the CUDA toolkit, meson,
# ninja and (optionally) PyTorch; SimGrid, GSL, inih and Criterion are not needed.
#
#   tests/gpu/run.sh [--quick]
#
# 1. builds the kernels with their CUDA backend, the model tables and tests/gpu's programs
#    into build-gpu/ (meson -Dgpu_only=true; DEFTSIM_GPU_BUILD names another folder);
# 2. runs test_gpu: every operation of the cuda backend against the cpu backend on fresh
#    random inputs (sets, ties, NaN, guard bands, every path forced; the device generator
#    against the host's bytes);
# 2b. runs test_gpu_sparsify (built when jansson is present): every sparsifier on a
#    cuda-staged kernel context, as `[device] kind = cuda` runs them, against a cpu one over
#    iterations with error feedback: selections, bytes, aggregates and residuals bit for bit;
# 2c. when SimGrid, GSL, inih and jansson are installed (pkg-config), builds the full deftsim
#    into build-gpu-full/ (DEFTSIM_FULL_BUILD) and runs a small scenario with [device] kind =
#    cpu and kind = cuda: every untimed column of rows.csv and every --dump file must be
#    equal (compare_runs.py); otherwise says why it is skipped;
# 3. runs bench_gpu: exact top-k and segmented top-k timed with CUDA events beside a
#    device-to-device copy (the memory floor), results verified, inputs written out;
# 4. times torch.topk on the same inputs (torch_topk.py) and prints one table, also written
#    to build-gpu/gpu-bench/table.md and, when $OUT is set, to $OUT/gpu_table.md;
# 5. with PyTorch, measures the forward and backward pass of ResNet-18 (CIFAR-10) and
#    BERT-base on this GPU (compute_times.py): rows for a [compute] table, written to
#    build-gpu/gpu-bench/compute.csv and, when $OUT is set, to $OUT/gpu_compute.csv.
# Exit status: 0 when the tests pass and every result is verified (a missed speed target is
# reported in the table, not as a failure); 1 otherwise; 77 when no GPU is usable (after the
# build, which then still shows that everything compiles).
set -euo pipefail
cd "$(dirname "$0")/../.."
QUICK=""
[ "${1:-}" = "--quick" ] && QUICK="--quick"
BUILD="${DEFTSIM_GPU_BUILD:-build-gpu}"
export PATH="$PATH:/usr/local/cuda/bin"

for tool in meson ninja nvcc python3; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool not found" >&2; exit 1; }
done

echo "== build ($BUILD, gpu_only)"
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" -Dgpu_only=true -Dbuildtype=release
fi
start=$(date +%s)
ninja -C "$BUILD" tests/gpu/test_gpu tests/gpu/bench_gpu
# Only with jansson (meson builds it then).
HAVE_SPARSIFY=0
if ninja -C "$BUILD" -t targets all 2>/dev/null | grep -q '^tests/gpu/test_gpu_sparsify:'; then
  ninja -C "$BUILD" tests/gpu/test_gpu_sparsify
  HAVE_SPARSIFY=1
fi
echo "build: $(( $(date +%s) - start )) s"

echo "== device"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
else
  echo "nvidia-smi not found"
fi

echo "== test_gpu"
set +e
"$BUILD/tests/gpu/test_gpu"
rc=$?
set -e
if [ "$rc" = 77 ]; then
  echo "run.sh: no usable CUDA device here: the build is done, the checks need a GPU" >&2
  exit 77
fi
[ "$rc" = 0 ] || { echo "run.sh: test_gpu failed" >&2; exit 1; }

echo "== test_gpu_sparsify"
if [ "$HAVE_SPARSIFY" = 1 ]; then
  "$BUILD/tests/gpu/test_gpu_sparsify" $QUICK || { echo "run.sh: test_gpu_sparsify failed" >&2; exit 1; }
else
  echo "skipped: jansson is not installed (the sparsifiers' headers need it)"
fi

echo "== deftsim run: [device] kind = cuda against kind = cpu"
FULL="${DEFTSIM_FULL_BUILD:-build-gpu-full}"
if pkg-config --exists simgrid gsl inih jansson zlib 2>/dev/null; then
  if [ ! -f "$FULL/build.ninja" ]; then
    meson setup "$FULL" -Dcuda=enabled -Dtests=false -Dbuildtype=release
  fi
  ninja -C "$FULL" deftsim
  RUNS="$BUILD/gpu-run"
  rm -rf "$RUNS"
  mkdir -p "$RUNS"
  for kind in cpu cuda; do
    "$FULL/deftsim" run scenarios/quickstart.ini --set device.kind=$kind \
      --set workers.counts=4,16 --set scenario.iterations=2 --set network.simulate=0 \
      --set scenario.output="$RUNS/$kind" --dump "$RUNS/$kind-dump" \
      || { echo "run.sh: deftsim run with kind = $kind failed" >&2; exit 1; }
  done
  python3 tests/gpu/compare_runs.py "$RUNS/cpu" "$RUNS/cuda" "$RUNS/cpu-dump" "$RUNS/cuda-dump" \
    || { echo "run.sh: kind = cuda and kind = cpu disagree" >&2; exit 1; }
  python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); print("cuda run: kernels", json.dumps(m["kernels"]))' "$RUNS/cuda/manifest.json" || true
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    cp "$RUNS/cuda/manifest.json" "$OUT/gpu_run_manifest.json" 2>/dev/null || true
  fi
  # The dumps hold every selection of every iteration: not kept.
  rm -rf "$RUNS"/*-dump
else
  echo "skipped: the engine needs SimGrid, GSL, inih and jansson, not all installed here" \
       "(test_gpu_sparsify above runs its sparsifiers on cuda-staged against cpu)"
fi

echo "== bench_gpu"
DIR="$BUILD/gpu-bench"
mkdir -p "$DIR"
set +e
"$BUILD/tests/gpu/bench_gpu" --dump "$DIR" $QUICK > "$DIR/ours.csv"
brc=$?
set -e
cat "$DIR/ours.csv"

echo "== torch.topk and the table"
python3 tests/gpu/torch_topk.py --dir "$DIR" --out "$DIR/table.md" || true
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  cp "$DIR/table.md" "$OUT/gpu_table.md" 2>/dev/null || true
  cp "$DIR/ours.csv" "$OUT/gpu_bench.csv"
fi
# The inputs (400 MB each at n = 1e8) are not kept.
rm -f "$DIR"/*.f32

echo "== compute times: forward and backward of the model tables (PyTorch)"
set +e
python3 tests/gpu/compute_times.py --out "$DIR/compute.csv"
crc=$?
set -e
if [ "$crc" = 0 ]; then
  cat "$DIR/compute.csv"
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then cp "$DIR/compute.csv" "$OUT/gpu_compute.csv"; fi
else
  echo "compute times: not measured (exit $crc; 77: no PyTorch or no GPU)"
fi
[ "$brc" = 0 ] || { echo "run.sh: bench_gpu failed or a result was not verified" >&2; exit 1; }
echo "run.sh: done"
