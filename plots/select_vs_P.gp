# select_vs_P.gp - selection time of the slowest worker against the number of workers P.
# datafile: one block per method (in the order of `methods`), rows "P median lo hi" in
# milliseconds: the median over a point's iterations of the slowest worker's selection time and
# its bootstrap confidence interval (summary.csv: select_seconds_*); then, when second = 1, one
# more block per method in the same order: the median worker's selection time
# (summary.csv: select_median_worker_seconds_*), drawn dashed. The slowest of P workers grows
# with P from timing noise alone; the median worker does not (docs/TIMING.md).
figtitle = "Gradient selection time vs number of workers"
load plotdir."/style.gp"
set ylabel "selection time per iteration (ms)"
set logscale y 10
set format y "%g"
eval logy_labels
if (second) {
    set label 92 "solid, filled markers: slowest worker;  dashed, open markers: median worker" \
        at screen 0.5, screen note_y center noenhanced font ",12" tc rgb "#222222"
    # Open markers of the same shape as each style's filled one (pt 7 -> 6, 5 -> 4, ...).
    opt(k) = (k == 7) ? 6 : (k == 5) ? 4 : (k == 9) ? 8 : (k == 11) ? 10 : (k == 13) ? 12 : k
    plot for [i=1:nmethods] datafile index (i-1) using ($1*dodge(i)):2:3:4 with yerrorlines ls mls(word(methods,i)) title mtit(word(methods,i)), \
         for [i=1:nmethods] datafile index (nmethods+i-1) using ($1*dodge(i)):2 with linespoints ls mls(word(methods,i)) dt 2 lw 1.6 pt opt(ls_pt[mls(word(methods,i))]) ps 2.0 notitle @noisy_layer
} else {
    eval plot_lines
}
