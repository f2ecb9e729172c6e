# captured_vs_P.gp - how much of the gradient the aggregate keeps, against P.
# datafile: one block per method, rows "P median lo hi": the fraction of the average
# accumulator's squared norm at the aggregate's indices (summary.csv: captured_frac_*).
figtitle = "Captured gradient norm vs number of workers"
load plotdir."/style.gp"
set ylabel "captured ||a_U||² / ||a||²  (1 = all)"
set yrange [0:1.05]
set ytics 0.1
set format y "%.1f"
# What the symbols are, on the figure itself.
set label 92 "a = (1/P) Σ_w acc_w: the workers' average accumulator (gradient + residual) before the step;  U: the aggregate's indices;  a_U: a on U, 0 elsewhere" \
    at screen 0.5, screen note_y center noenhanced font ",11" tc rgb "#222222"
eval plot_lines
