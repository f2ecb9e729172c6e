# train_curve.gp - training with each sparsifier in the loop: test accuracy or test loss
# against iterations or against simulated training time, one curve per method, at one density
# and worker count (dense included). Drawn by `deftsim plot TRAIN_DIR` (src/cli/plot_train.c).
# Variables (gnuplot -e), besides style.gp's: yaxis ("accuracy" or "loss"), xaxis
# ("iteration" or "time"). datafile: one block per method (in the order of methods), columns
# iteration, simulated seconds, test accuracy (%), test loss, training loss; the first row of a
# block is iteration 0, the initial model before any update (its training loss empty: NaN).
figtitle = sprintf("Test %s vs %s", yaxis, (xaxis eq "time") ? "simulated training time" : "iteration")
load plotdir."/style.gp"
unset logscale x
set xrange [*:*]
set autoscale x
set format x "%g"
set mxtics
set xlabel (xaxis eq "time") ? "simulated time (s): measured compute + [network] simulation" \
                             : "iteration (every worker: one minibatch)"
set ylabel (yaxis eq "loss") ? "test loss (cross-entropy)" : "test accuracy (%)"
set yrange [*:*]
# The curves start at iteration 0 (the initial model, at time 0): a margin keeps that point off
# the axes.
set autoscale xfix
set offsets graph 0.02, graph 0.02, graph 0.04, graph 0.04
set datafile missing "NaN"
xcol = (xaxis eq "time") ? 2 : 1
ycol = (yaxis eq "loss") ? 4 : 3
plot for [i=1:nmethods] datafile index (i-1) using (column(xcol)):(column(ycol)) \
     with linespoints ls mls(word(methods, i)) title mtit(word(methods, i))
