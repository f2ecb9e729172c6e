#!/usr/bin/env bash
# train-figures.sh - the training figures of docs/TRAINING.md from the results of
#   deftsim train scenarios/train_mlp.ini     (results/train_mlp)
#   deftsim train scenarios/train_cnn.ini     (results/train_cnn)
# into docs/figures/train_*.png.
#
#   bash scripts/train-figures.sh [MLP_RESULTS] [CNN_RESULTS]
set -euo pipefail
cd "$(dirname "$0")/.."
mlp=${1:-results/train_mlp}
cnn=${2:-results/train_cnn}
figs=docs/figures
mkdir -p "$figs"
methods="deft topk topk-ag cltk gtopk dgc dense"
gp() { gnuplot -e "term='png'; plotdir='plots'; methods='$methods'; $1" "$2"; }

hyper="SGD lr 0.05 momentum 0.9, 10,000 test images"
for d in 0.01 0.001; do
    for P in 8 16; do
        for x in iteration time; do
            sub="fmnist_mlp, P = $P workers x 32 images, density $d, $hyper"
            gp "outfile='$figs/train_mlp_P${P}_d${d}_$x.png'; datafile='$mlp/curves.csv'; P=$P; density='$d'; xaxis='$x'; subtitle='$sub'" \
                plots/train_curves.gp
        done
    done
    sub="fmnist_mlp after 600 iterations of 32 images per worker, density $d (dense: all of the gradient)"
    gp "outfile='$figs/train_mlp_final_d$d.png'; datafile='$mlp/final.csv'; density='$d'; pmin=4; pmax=16; subtitle='$sub'" \
        plots/train_final.gp
done
if [ -f "$cnn/curves.csv" ]; then
    sub="fmnist_cnn, dense, P = 4 workers x 32 images, $hyper"
    gnuplot -e "term='png'; plotdir='plots'; outfile='$figs/train_cnn_dense.png'; datafile='$cnn/curves.csv'; method='dense'; P=4; target=88; subtitle='$sub'" \
        plots/train_dense.gp
fi
echo "train-figures: $figs/train_*.png"
