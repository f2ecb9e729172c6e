# speedup_vs_P.gp - selection speedup over Top-k at the same P.
# datafile: one block per method, rows "P median lo hi": Top-k's median selection time over the
# method's, with a bootstrap interval (summary.csv: select_speedup*). Above 1: faster than Top-k.
figtitle = "Selection speedup over Top-k vs number of workers"
load plotdir."/style.gp"
set ylabel "speedup over Top-k (x, higher is faster)"
set logscale y 2
set format y "%g"
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb "#888888" back
eval plot_lines
