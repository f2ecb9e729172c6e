# iteration_vs_P.gp - simulated time of a whole iteration (selection, other compute and
# communication on the critical path) against P.
# datafile: one block per method, rows "P median lo hi" in milliseconds (summary.csv:
# iteration_seconds_*, from the network simulation).
figtitle = "Iteration time vs number of workers (simulated network)"
load plotdir."/style.gp"
set ylabel "time per iteration (ms)"
set logscale y 10
set format y "%g"
eval logy_labels
eval plot_lines
