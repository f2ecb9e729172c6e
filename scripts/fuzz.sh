#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (build-fuzz-clang/, -Dfuzz=true) and
# runs each for SECONDS (default 600), then prints per target: executions, exec/s, coverage
# (libFuzzer's cov: and ft: at the end) and crashes. Needs clang and its libFuzzer runtime
# (Debian: clang-14, libclang-rt-14-dev).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      TARGET: config manifest safetensors model_csv
#                                              platform cli (default: all)
#
# The corpus grows in a scratch folder ($FUZZ_WORK, default /tmp/deftsim-fuzz), seeded from
# tests/fuzz/corpus/fuzz_<target> (and tests/fuzz/fuzz_<target>.dict when there is one); the
# repository is not written. Crashes, leaks and timeouts
# land in $FUZZ_WORK/<target>/crashes/: copy a fixed one to tests/fuzz/crashes/fuzz_<target>/.
# FUZZ_JOBS=2 runs two targets at a time; FUZZ_BUILD names another build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config manifest safetensors model_csv platform cli)
build=${FUZZ_BUILD:-build-fuzz-clang}
work=${FUZZ_WORK:-/tmp/deftsim-fuzz}
jobs=${FUZZ_JOBS:-1}

if [ ! -f "$build/build.ninja" ]; then
  CC=clang meson setup "$build" -Dfuzz=true -Dtests=false -Dcuda=disabled -Db_lundef=false \
      -Dbuildtype=debugoptimized >/dev/null
fi
# FUZZ_NOBUILD=1: run the binaries as they are (another run is building or fuzzing).
[ -n "${FUZZ_NOBUILD:-}" ] || ninja -C "$build" $(printf 'tests/fuzz/fuzz_%s ' "${targets[@]}") >/dev/null

run_one() {
  local t=$1 dir="$work/$1"
  mkdir -p "$dir/corpus" "$dir/crashes"
  cp -n tests/fuzz/corpus/fuzz_"$t"/* "$dir/corpus/" 2>/dev/null || true
  local extra=()
  # The command line prints usage messages for nearly every input.
  [ "$t" = cli ] && extra=(-close_fd_mask=2)
  [ -f tests/fuzz/fuzz_"$t".dict ] && extra+=(-dict=tests/fuzz/fuzz_"$t".dict)
  "$build/tests/fuzz/fuzz_$t" "$dir/corpus" -max_total_time="$secs" -print_final_stats=1 \
      -timeout=10 -rss_limit_mb=4096 -artifact_prefix="$dir/crashes/" "${extra[@]}" \
      >"$dir/log.txt" 2>&1 || true
}
export -f run_one
export build work secs
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}'

printf '%-12s %12s %8s %7s %7s %8s\n' target executions exec/s cov ft crashes
for t in "${targets[@]}"; do
  log="$work/$t/log.txt"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
  crashes=$(find "$work/$t/crashes" -type f | wc -l)
  printf '%-12s %12s %8s %7s %7s %8s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" \
      "$crashes"
done
echo "logs and crashes: $work/<target>/"
