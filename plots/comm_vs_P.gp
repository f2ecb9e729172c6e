# comm_vs_P.gp - simulated communication time per iteration against P.
# datafile: one block per method, rows "P median lo hi" in milliseconds (summary.csv:
# comm_seconds_*, from the network simulation).
figtitle = "Communication time vs number of workers (simulated network)"
load plotdir."/style.gp"
set ylabel "communication time per iteration (ms)"
set logscale y 10
set format y "%g"
eval logy_labels
eval plot_lines
