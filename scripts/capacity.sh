#!/usr/bin/env bash
# capacity.sh - the largest P one machine holds for each method, from deftsim's own memory plan
# (`deftsim run --dry-run`, docs/OUTPUT.md): ResNet-18 (resnet18_cifar10) at one density,
# with full error feedback as one process, with sampled error feedback ([sparsify]
# sampled_workers, default 8) as one process, and with full error feedback in spread mode over
# R ranks (mpirun, each rank's RAM the given size: one rank a machine). Nothing runs but the
# plans; the largest P is searched up to CAP.
#
#   bash scripts/capacity.sh [RAM [DENSITY [CAP [RANKS...]]]]     # defaults 24G 0.01 65536 4 16
#
# Prints a Markdown table. DEFTSIM names the binary (default build/deftsim).
set -euo pipefail
cd "$(dirname "$0")/.."
ram=${1:-24G}
density=${2:-0.01}
cap=${3:-65536}
shift $(($# < 3 ? $# : 3))
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(4 16)
exe=${DEFTSIM:-build/deftsim}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The largest P that fits as the plan prints it ("largest P that fits: N"), asking for CAP.
largest() {
    local out
    out=$("$@" run scenarios/resnet18_cifar10.ini --dry-run --ram "$ram" -o "$tmp/out" \
        --set workers.counts="$cap" --set sparsify.densities="$density" \
        --set sparsify.methods="$method" --set sparsify.error_feedback="$ef" 2>&1 || true)
    local n
    n=$(printf '%s\n' "$out" | sed -n 's/^largest P that fits: \([0-9]*\).*/\1/p' | head -1)
    if [ -z "$n" ]; then
        printf '%s\n' "$out" >&2
        echo "capacity.sh: no plan for $method ($ef)" >&2
        exit 1
    fi
    [ "$n" -ge "$cap" ] && n=">= $cap"
    echo "$n"
}

methods=$("$exe" config --methods | tail -n +2 | cut -f1)
head="| method | full, one process | sampled, one process |"
rule="|---|---:|---:|"
for r in "${ranks[@]}"; do
    head="$head full, spread over $r ranks |"
    rule="$rule---:|"
done
echo "ResNet-18 (resnet18_cifar10), density $density, $ram of RAM per process (budget as [engine] memory_budget)"
echo
echo "$head"
echo "$rule"
for method in $methods; do
    ef=full
    row="| $method | $(largest "$exe")"
    ef=sampled
    row="$row | $(largest "$exe")"
    ef=full
    for r in "${ranks[@]}"; do
        row="$row | $(largest mpirun --oversubscribe -n "$r" "$exe")"
    done
    echo "$row |"
done
