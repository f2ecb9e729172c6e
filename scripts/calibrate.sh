#!/usr/bin/env bash
# calibrate.sh - the measurements behind docs/CALIBRATION.md, from scratch: records real
# gradient traces of the MLP and the CNN (P = 16 workers, iterations 0, 50 and 300), writes
# synthetic traces of the same model tables (the generator's defaults, the suggested fit, and
# a grid over signal and tail), computes the statistics of each (scripts/trace_stats.py) and
# draws docs/figures/calib_*.png. About 10 minutes on one core; 700 MB of traces in
# results/calibration/ (rerun with KEEP_TRACES=0 to delete them at the end).
#
#   bash scripts/calibrate.sh [BUILD_DIR]        (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
exe=$build/deftsim
py=.venv/bin/python3
out=results/calibration
figs=docs/figures
mkdir -p "$out" "$figs"
rm -rf "$out/stats"

# Real traces: every worker's gradient before communication, dense training as in
# scenarios/train_mlp.ini (32 images per worker, SGD lr 0.05, momentum 0.9).
for m in mlp cnn; do
    if [ ! -f "$out/${m}_recorded/manifest.json" ]; then
        "$exe" trace record scenarios/train_mlp.ini -q -P 16 --set train.record=0,50,300 \
            --set train.model=$m --set gradients.model=train/models/fmnist_$m.csv \
            -o "$out/${m}_recorded"
    fi
    "$py" scripts/trace_stats.py "$out/${m}_recorded" --label $m-recorded -o "$out/stats"
done

# Synthetic traces of the same tables: label, then deftsim trace gen's options.
synth() {
    local m=$1 label=$2
    shift 2
    # Regenerated every time: deftsim trace gen refuses to replace a trace of other settings.
    rm -rf "$out/synthetic/$label"
    "$exe" trace gen --model train/models/fmnist_$m.csv --workers 16 --iterations 1 --seed 1 \
        "$@" -o "$out/synthetic/$label" 2>/dev/null
    "$py" scripts/trace_stats.py "$out/synthetic/$label" --label "$label" -o "$out/stats"
}
# The suggested values of docs/CALIBRATION.md, per model; the generator draws each layer's
# scale from the seed, so the fit is also drawn with other seeds to show what that changes.
fit_mlp=(--scale-decades 1.5 --bias-shift 0.2 --signal 0.3 --tail 4)
fit_cnn=(--scale-decades 1.5 --bias-shift 0.2 --signal 0.6 --tail 2.5)
for m in mlp cnn; do
    synth $m $m-default
    fit=fit_$m[@]
    synth $m $m-fit "${!fit}"
    for seed in 2 3 4; do synth $m $m-fit-seed$seed "${!fit}" --seed $seed; done
    for s in 0.05 0.2 0.4 0.6; do
        for t in 2.5 4; do
            synth $m $m-s$s-t$t --scale-decades 1.5 --bias-shift 0.2 --signal $s --tail $t
        done
    done
done

# gp FIGURE SCRIPT SUBTITLE VARIABLES...: one figure (variables as gnuplot -e assignments).
gp() {
    local fig=$1 script=$2 sub=$3
    shift 3
    gnuplot -e "term='png'; plotdir='plots'; outfile='$figs/$fig.png'; subtitle='$sub'; $*" \
        "plots/$script.gp"
}
rec="recorded: dense training, 16 workers x 32 images"
for m in mlp cnn; do
    series="$m-recorded@0 $m-recorded@50 $m-recorded@300 $m-default@0 $m-fit@0 $m-fit-seed2@0"
    for d in 0.01 0.001; do
        gp calib_buildup_${m}_d$d train_calib_buildup \
            "fmnist_$m, k = floor($d n); $rec; synthetic: the same table" \
            "datafile='$out/stats/buildup.csv'; density='$d'; series='$series'"
    done
    gp calib_layers_$m train_calib_layers "fmnist_$m: RMS of each tensor, median over 16 workers" \
        "datafile='$out/stats/layers.csv'; series='$series'"
done
gp calib_tails train_calib_tails \
    "pooled over the weight tensors and 16 workers; synthetic: default Student-t 4, fits t 4 (mlp) and t 2.5 (cnn)" \
    "datafile='$out/stats/tails.csv'; series='mlp-recorded@50 mlp-recorded@300 cnn-recorded@50 cnn-recorded@300 mlp-default@0 mlp-fit@0 cnn-fit@0'"

if [ "${KEEP_TRACES:-1}" = 0 ]; then rm -rf "$out"/*_recorded "$out/synthetic"; fi
echo "calibrate: statistics in $out/stats, figures in $figs/calib_*.png"
