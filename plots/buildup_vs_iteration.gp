# buildup_vs_iteration.gp - gradient build-up |U| / k over the iterations, at one P.
# datafile: one block per method, rows "iteration buildup" (iterations.csv of deftsim analyze:
# each iteration's value, no statistics). For MiCRO and ExDyna the build-up is their count
# against k, K / k: the traffic the threshold controller delivers against the user's k, which
# it steers towards 1. The set-up's variables: those of style.gp, plus P (the worker count
# shown) and itmax (the last iteration).
figtitle = sprintf("Gradient build-up over the iterations, P = %d", P)
load plotdir."/style.gp"
unset logscale x
set format x "%g"
set xlabel "iteration"
set xrange [-0.6 : itmax + 0.6]
set xtics 1
if (itmax > 20) { set xtics autofreq }
set ylabel "build-up |U| / k  (K / k; 1 = k indices)"
set logscale y 2
set format y "%g"
# The axis fits the values with a margin, 1 included, so that markers at 1 clear the border.
stats datafile using 1:2 nooutput
set yrange [(STATS_min_y < 1 ? STATS_min_y : 1) / 1.3 : (STATS_max_y > 1 ? STATS_max_y : 1) * 1.3]
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb "#888888" back
# Several methods often hold the same value (build-up 1 at every iteration): drawn alike, the
# last would hide the others. So each method's markers sit a little to the side of the
# iteration (at most 0.3 of an iteration; the values themselves are not moved) and shrink in
# the order of the key (the first method's marker is the largest, drawn first), so markers at
# one value nest inside each other; every line keeps its style's dash pattern.
bdodge(i) = nmethods > 1 ? 0.6 * ((i - 1.0) / (nmethods - 1) - 0.5) : 0
bps(i) = nmethods > 1 ? 2.6 - 1.6 * (i - 1.0) / (nmethods - 1) : 1.5
set label 92 "methods at equal values: markers nested (largest first, in the key's order) and spread at most 0.3 iteration apart; values not moved" \
    at screen 0.5, screen note_y center noenhanced font ",11" tc rgb "#222222"
plot for [i=1:nmethods] datafile index (i-1) using ($1 + bdodge(i)):2 with linespoints ls mls(word(methods,i)) ps bps(i) title mtit(word(methods,i))
