# select_vs_P.gp - selection time of the slowest worker against the number of workers P.
# datafile: one block per method (in the order of `methods`), rows "P median lo hi" in
# milliseconds: the median over a point's iterations of the slowest worker's selection time and
# its bootstrap confidence interval (summary.csv: select_seconds_*).
figtitle = "Gradient selection time vs number of workers"
load plotdir."/style.gp"
set ylabel "selection time per iteration, slowest worker (ms)"
set logscale y 10
set format y "%g"
eval logy_labels
eval plot_lines
