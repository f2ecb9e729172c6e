# imbalance_vs_P.gp - load imbalance of the selection work against P.
# datafile: one block per method, rows "P median lo hi": max / mean over the workers of their
# selection times (summary.csv: imbalance_seconds_*). 1 means every worker works equally long;
# P means one worker does all the work (a leader's selection).
# Extra variable: at_P, the methods left out because their imbalance equals P at every point
# (CLT-k: its leader selects for all); drawn, they would squash every other line near 1.
figtitle = "Load imbalance of the selection vs number of workers"
load plotdir."/style.gp"
set ylabel "imbalance: max / mean selection time (1 = balanced)"
set logscale y 2
set format y "%g"
set ytics add ("1.5" 1.5, "3" 3, "6" 6, "12" 12, "24" 24)
# The axis fits the shown methods' bars, 1 included.
set xrange [*:*]
stats datafile using 3:4 nooutput
ylo = STATS_min_x < 1 ? STATS_min_x : 1
set yrange [ylo / 1.08 : STATS_max_y * 1.12]
if (exists("pmin") && exists("pmax")) { set xrange [pmin / 1.3 : pmax * 1.3] }
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb "#888888" back
if (exists("at_P") && strlen(at_P) > 0) {
    atn = ""
    do for [j = 1:words(at_P)] { atn = atn . (j > 1 ? ", " : "") . mtit(word(at_P, j)) }
    set label 92 sprintf("not shown: %s, whose imbalance is P at every point (its leader selects for all workers)", atn) \
        at screen 0.5, screen note_y center noenhanced font ",12" tc rgb "#222222"
}
eval plot_lines
