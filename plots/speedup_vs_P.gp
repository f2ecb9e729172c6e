# speedup_vs_P.gp - selection speedup over Top-k at the same P.
# datafile: one block per method, rows "P median lo hi": Top-k's median selection time over the
# method's, with a bootstrap interval (summary.csv: select_speedup*). Above 1: faster than Top-k.
figtitle = "Selection speedup over Top-k vs number of workers"
load plotdir."/style.gp"
set ylabel "speedup over Top-k (x, higher is faster)"
set logscale y 2
set format y "%g"
# The axis fits the bars (columns 3 and 4) with a small margin, 1 included, rather than the
# powers of 2 autoscaling would round out to; ticks at 1, 2, 5 times powers of ten within it.
set xrange [*:*]
stats datafile using 3:4 nooutput
ylo = STATS_min_x < 1 ? STATS_min_x : 1
yhi = STATS_max_y > 1 ? STATS_max_y : 1
set yrange [ylo / 1.12 : yhi * 1.12]
set ytics () 
do for [e = -6:6] { set ytics add (sprintf('%g', 10.0**e) 10.0**e, sprintf('%g', 2 * 10.0**e) 2 * 10.0**e, sprintf('%g', 5 * 10.0**e) 5 * 10.0**e) }
set mytics 1
if (exists("pmin") && exists("pmax")) { set xrange [pmin / 1.3 : pmax * 1.3] }
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb "#888888" back
eval plot_lines
