#!/bin/sh
# nccl-busbw.sh - the simulated bus bandwidth of NCCL's allreduce on the dgx-h100 preset, to set
# beside nccl-tests' all_reduce_perf (docs/NETWORK.md, "Against nccl-tests").
#
#   scripts/nccl-busbw.sh [BUILD_DIR] [extra nccl_busbw options...]
#
# Runs build/tests/sim/nccl_busbw (built by `ninja -C BUILD_DIR`): 1, 2, 8 and 32 nodes of 8
# GPUs, 1 MiB to 1 GiB in powers of 4, CM02 without crosstraffic and the default LV08, NCCL's
# ring, tree and auto with 16 channels, the rings in approximate mode (equal to the exact
# rings here: docs/NETWORK.md), the tree in full. One CSV row per point on stdout. Later
# options override these (e.g. --nodes 1,2 --set network.nccl_channels=24).
set -eu
BUILD=${1:-build}
[ $# -gt 0 ] && shift
EXE="$BUILD/tests/sim/nccl_busbw"
if [ ! -x "$EXE" ]; then
    echo "nccl-busbw.sh: $EXE not found: build first (ninja -C $BUILD)" >&2
    exit 2
fi
exec "$EXE" --nodes 1,2,8,32 \
    --sizes 1048576,4194304,16777216,67108864,268435456,1073741824 \
    --models CM02,LV08 --algos ring,tree,auto \
    --set network.preset=dgx-h100 --set network.library=nccl \
    --set network.nccl_channels=16 --set network.mode=approximate "$@"
