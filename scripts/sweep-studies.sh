#!/usr/bin/env bash
# The studies a user starts from: sweep, analyze and plot one or all of them.
#
#   bash scripts/sweep-studies.sh resnet18|lstm|ncf|bert|network|all [deftsim sweep options]
#
#   resnet18  scenarios/resnet18_cifar10.ini    ResNet-18 / CIFAR-10, densities 0.01, 0.001, P = 2..1024
#   lstm      scenarios/lstm_wikitext2.ini      3-layer LSTM / WikiText-2, P = 2..512
#   ncf       scenarios/ncf_ml20m.ini           NCF (NeuMF) / MovieLens-20M, P = 2..512
#   bert      scenarios/bert_base.ini           BERT-base, P = 2..256
#   network   scenarios/network_comparison.ini  ResNet-18 on 10, 25 and 100 Gb/s (--vary
#                                               network.bandwidth: one folder, one summary)
#
# Each study goes to results/<scenario name>/ (points, rows.csv, manifest.json, summary.csv,
# summary.md, plots/). A sweep resumes where it stopped: run the same command again after an
# interruption. Extra arguments go to deftsim sweep (e.g. --set scenario.iterations=3 for a
# quick look, --dry-run to list the points and the memory plan first). Builds deftsim if
# build/deftsim is missing (scripts/build.sh); does not install packages (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
study=$1
shift

[ -x build/deftsim ] || bash scripts/build.sh
deftsim=./build/deftsim

# Sweep, then analyze and plot what finished. A sweep with failed points exits 1: analyze and
# plot the finished points anyway, then report the failure.
run_study() {
  local scenario=$1; shift
  local out="results/$(basename "$scenario" .ini)"
  local rc=0
  "$deftsim" sweep "$scenario" -o "$out" "$@" || rc=$?
  for a in "$@"; do
    if [ "$a" = "--dry-run" ] || [ "$a" = "-n" ]; then return $rc; fi
  done
  if [ $rc -eq 0 ] || [ $rc -eq 1 ]; then
    "$deftsim" analyze "$out"
    "$deftsim" plot "$out"
  fi
  echo "sweep-studies: $scenario -> $out (summary.md, plots/)" >&2
  return $rc
}

network() {
  # The bandwidth axis needs the network simulation's [network] bandwidth key.
  # (Read the keys whole first: grep -q would close the pipe early and fail it under pipefail.)
  local keys
  keys=$("$deftsim" config --keys)
  if ! grep -q '^network\.bandwidth ' <<<"$keys"; then
    echo "sweep-studies: this deftsim has no [network] bandwidth key yet (the network" \
         "simulation is not built in); the network comparison cannot run" >&2
    return 2
  fi
  run_study scenarios/network_comparison.ini --vary network.bandwidth=10Gbps,25Gbps,100Gbps "$@"
}

scenario_of() {
  case "$1" in
    resnet18) echo scenarios/resnet18_cifar10.ini ;;
    lstm)     echo scenarios/lstm_wikitext2.ini ;;
    ncf)      echo scenarios/ncf_ml20m.ini ;;
    bert)     echo scenarios/bert_base.ini ;;
    *)        usage ;;
  esac
}

case "$study" in
  network) network "$@" ;;
  all)
    rc=0
    for s in resnet18 lstm ncf bert; do run_study "$(scenario_of $s)" "$@" || rc=1; done
    network "$@" || rc=1
    exit $rc ;;
  *) run_study "$(scenario_of "$study")" "$@" ;;
esac
