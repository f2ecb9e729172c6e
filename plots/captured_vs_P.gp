# captured_vs_P.gp - how much of the gradient the aggregate keeps, against P.
# datafile: one block per method, rows "P median lo hi": the fraction of the average
# accumulator's squared norm at the aggregate's indices (summary.csv: captured_frac_*).
figtitle = "Captured gradient norm vs number of workers"
load plotdir."/style.gp"
set ylabel "captured fraction of ||a||^2 (1 = all)"
set yrange [0:1.05]
set ytics 0.1
set format y "%.1f"
eval plot_lines
