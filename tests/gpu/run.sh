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
# 3. runs bench_gpu: exact top-k and segmented top-k timed with CUDA events beside a
#    device-to-device copy (the memory floor), results verified, inputs written out;
# 4. times torch.topk on the same inputs (torch_topk.py) and prints one table, also written
#    to build-gpu/gpu-bench/table.md and, when $OUT is set, to $OUT/gpu_table.md.
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
[ "$brc" = 0 ] || { echo "run.sh: bench_gpu failed or a result was not verified" >&2; exit 1; }
echo "run.sh: done"
