# buildup_vs_P.gp - gradient build-up |U| / k against P.
# datafile: one block per method, rows "P median lo hi": the aggregate's nonzeros over k
# (summary.csv: buildup_*). 1 means the aggregate is exactly k wide; top-k's grows towards P.
figtitle = "Gradient build-up vs number of workers"
load plotdir."/style.gp"
set ylabel "build-up |U| / k  (1 = k indices)"
set logscale y 2
set format y "%g"
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb "#888888" back
eval plot_lines
