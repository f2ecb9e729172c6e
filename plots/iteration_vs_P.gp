# iteration_vs_P.gp - simulated time of an iteration's sparsification and communication
# (selection, the sparsifier's other compute and the collectives on the critical path) against
# P. The training step's forward and backward pass is not modelled and not included.
# datafile: one block per method, rows "P median lo hi" in milliseconds (summary.csv:
# iteration_seconds_*, from the network simulation).
figtitle = "Sparsification + communication time per iteration vs number of workers"
load plotdir."/style.gp"
set ylabel "sparsification + communication per iteration (ms)"
set logscale y 10
set format y "%g"
eval logy_labels
set label 92 "simulated network; no forward and backward pass: the training step's compute is not modelled" \
    at screen 0.5, screen 0.89 - (strlen(omitted) > 0 ? 0.035 : 0) center noenhanced font ",12" tc rgb "#222222"
eval plot_lines
