# iteration_vs_P.gp - simulated time of an iteration against P: its sparsification and
# communication (selection, the sparsifier's other compute and the collectives on the critical
# path), and with [compute] (fwdbwd = 1) the training step's forward and backward pass too
# (given durations, docs/COMPUTE.md). Without [compute] the forward and backward pass is not
# modelled and not included, as the figure says.
# datafile: one block per method, rows "P median lo hi" in milliseconds (summary.csv:
# iteration_seconds_*, from the network simulation).
if (!exists("fwdbwd")) fwdbwd = 0
figtitle = fwdbwd ? "Training iteration time vs number of workers" \
                  : "Sparsification + communication time per iteration vs number of workers"
load plotdir."/style.gp"
set ylabel (fwdbwd ? "iteration: forward + backward + sparsification + communication (ms)" \
                   : "sparsification + communication per iteration (ms)")
set logscale y 10
set format y "%g"
eval logy_labels
set label 92 (fwdbwd ? "simulated network; forward and backward pass as given by [compute] (not measured)" \
                     : "simulated network; no forward and backward pass: the training step's compute is not modelled") \
    at screen 0.5, screen note_y center noenhanced font ",12" tc rgb "#222222"
eval plot_lines
