# bytes_vs_P.gp - bytes a worker sends per iteration against P: the mean worker and the busiest.
# datafile: one block per method, rows "P median lo hi" in MB (10^6 bytes): the mean over the
# workers of bytes_sent, median over iterations (summary.csv: bytes_sent_*); then, when
# second = 1, one more block per method in the same order: the busiest worker's bytes_sent
# (summary.csv: bytes_sent_max_*). Where the two differ (gTop-k's tree, a leader's broadcast),
# the busiest worker is the one the network waits for.
figtitle = "Traffic: bytes sent per worker vs number of workers"
load plotdir."/style.gp"
set ylabel "sent per worker and iteration (MB)"
set logscale y 10
set format y "%g"
eval logy_labels
if (second) {
    set label 92 "solid, filled markers: mean over the workers;  dashed, open markers: the busiest worker" \
        at screen 0.5, screen note_y center noenhanced font ",12" tc rgb "#222222"
    # Open markers of the same shape as each style's filled one (pt 7 -> 6, 5 -> 4, ...).
    opt(k) = (k == 7) ? 6 : (k == 5) ? 4 : (k == 9) ? 8 : (k == 11) ? 10 : (k == 13) ? 12 : \
             (k == 15) ? 14 : k
    plot for [i=1:nmethods] datafile index (i-1) using ($1*dodge(i)):2:3:4 with yerrorlines ls mls(word(methods,i)) title mtit(word(methods,i)), \
         for [i=1:nmethods] datafile index (nmethods+i-1) using ($1*dodge(i)):2 with linespoints ls mls(word(methods,i)) dt 2 lw 1.6 pt opt(ls_pt[mls(word(methods,i))]) ps 2.0 notitle @noisy_layer
} else {
    eval plot_lines
}
