# train_dense.gp - one training run's test accuracy and test loss against epochs (the dense
# reference). Variables (gnuplot -e): term, outfile, plotdir, datafile (curves.csv), method,
# P, subtitle, target (a horizontal line, in percent; 0 for none).
figtitle = "Dense training: test accuracy and loss"
methods = method
omitted = ""
load plotdir."/style.gp"
unset logscale x
set xrange [0:*]
set format x "%g"
set mxtics
set xlabel "epoch"
set ylabel "test accuracy (%)"
set y2label "test loss (cross-entropy)"
set y2tics nomirror
set border 11 lc rgb "#333333"
set rmargin 12
set datafile separator ","
if (target > 0) {
    set arrow 1 from graph 0, first target to graph 1, first target nohead dt 2 lc rgb "#888888" back
    set label 2 sprintf("%g%%", target) at graph 0.01, first target offset 0, 0.6 tc rgb "#666666"
}
rows = sprintf("< awk -F, 'NR > 1 && $4 == \"%s\" && $7 == %d' '%s'", method, P, datafile)
plot rows using 11:($16 * 100) with linespoints ls 2 title "test accuracy (left axis)", \
     rows using 11:15 axes x1y2 with linespoints ls 8 title "test loss (right axis)"
