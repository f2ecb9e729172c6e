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
set xrange [-0.5 : itmax + 0.5]
set xtics 1
if (itmax > 20) { set xtics autofreq }
set ylabel "build-up |U| / k  (K / k; 1 = k indices)"
set logscale y 2
set format y "%g"
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb "#888888" back
plot for [i=1:nmethods] datafile index (i-1) using 1:2 with linespoints ls mls(word(methods,i)) title mtit(word(methods,i))
