# imbalance_vs_P.gp - load imbalance of the selection work against P.
# datafile: one block per method, rows "P median lo hi": max / mean over the workers of their
# selection times (summary.csv: imbalance_seconds_*). 1 means every worker works equally long;
# P means one worker does all the work (a leader's selection).
figtitle = "Load imbalance of the selection vs number of workers"
load plotdir."/style.gp"
set ylabel "imbalance: max / mean selection time (1 = balanced)"
set logscale y 2
set format y "%g"
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb "#888888" back
eval plot_lines
