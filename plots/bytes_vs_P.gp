# bytes_vs_P.gp - bytes one worker sends per iteration against P.
# datafile: one block per method, rows "P median lo hi" in MB (10^6 bytes): the mean over the
# workers of bytes_sent, median over iterations (summary.csv: bytes_sent_*).
figtitle = "Traffic: bytes sent per worker vs number of workers"
load plotdir."/style.gp"
set ylabel "sent per worker and iteration (MB)"
set logscale y 10
set format y "%g"
eval logy_labels
eval plot_lines
