#!/usr/bin/env bash
# train-figures.sh - the training figures of docs/TRAINING.md from the results of
#   deftsim train scenarios/train_mlp.ini     (results/train_mlp)
#   deftsim train scenarios/train_cnn.ini     (results/train_cnn)
# into docs/figures/train_*.png.
#
#   bash scripts/train-figures.sh [MLP_RESULTS] [CNN_RESULTS]
#
# The test-accuracy curves (test_accuracy_vs_*) are those of `deftsim plot MLP_RESULTS` (drawn into
# MLP_RESULTS/plots/, copied here under the names TRAINING.md uses); the final-accuracy and the
# dense CNN figures have scripts of their own (plots/train_final.gp, plots/train_dense.gp).
# $DEFTSIM names the program (default build/deftsim).
set -euo pipefail
cd "$(dirname "$0")/.."
mlp=${1:-results/train_mlp}
cnn=${2:-results/train_cnn}
deftsim=${DEFTSIM:-build/deftsim}
figs=docs/figures
mkdir -p "$figs"
methods="deft topk topk-ag cltk gtopk dgc dense"
gp() { gnuplot -e "term='png'; plotdir='plots'; methods='$methods'; $1" "$2"; }

"$deftsim" plot "$mlp" --format png --quiet
for d in 0.01 0.001; do
    for P in 8 16; do
        cp "$mlp/plots/test_accuracy_vs_iteration_d${d}_P${P}.png" "$figs/train_mlp_P${P}_d${d}_iteration.png"
        cp "$mlp/plots/test_accuracy_vs_time_d${d}_P${P}.png" "$figs/train_mlp_P${P}_d${d}_time.png"
    done
    sub="fmnist_mlp after 600 iterations of 32 images per worker, density $d (dense: all of the gradient)"
    gp "outfile='$figs/train_mlp_final_d$d.png'; datafile='$mlp/final.csv'; density='$d'; pmin=4; pmax=16; subtitle='$sub'" \
        plots/train_final.gp
done
if [ -f "$cnn/curves.csv" ]; then
    hyper="SGD lr 0.05 momentum 0.9, 10,000 test images"
    sub="fmnist_cnn, dense, P = 4 workers x 32 images, $hyper"
    gnuplot -e "term='png'; plotdir='plots'; outfile='$figs/train_cnn_dense.png'; datafile='$cnn/curves.csv'; method='dense'; P=4; target=88; subtitle='$sub'" \
        plots/train_dense.gp
fi
echo "train-figures: $figs/train_*.png"
