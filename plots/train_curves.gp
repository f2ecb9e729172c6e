# train_curves.gp - test accuracy of training with each sparsifier in the loop, against
# iterations or against simulated time, at one worker count and density (dense included).
# Variables (gnuplot -e): term, outfile, plotdir, datafile (a deftsim train curves.csv),
# methods (space-separated), P, density (as written in the CSV), xaxis ("iteration" or
# "time"), subtitle. Rows of other points are filtered out with awk.
figtitle = (xaxis eq "time") ? "Test accuracy vs simulated training time" \
                             : "Test accuracy vs iteration"
omitted = ""
load plotdir."/style.gp"
unset logscale x
set xrange [*:*]
set autoscale x
set format x "%g"
set mxtics
set xlabel (xaxis eq "time") ? "simulated time (s): measured compute + [network] simulation" \
                             : "iteration (every worker: one minibatch)"
set ylabel "test accuracy (%)"
set yrange [*:*]
set datafile separator ","
# curves.csv columns: 4 method, 5 density, 7 P, 10 iteration, 16 test_accuracy, 22 sim_seconds
xcol = (xaxis eq "time") ? 22 : 10
rows(m) = sprintf("< awk -F, 'NR > 1 && $4 == \"%s\" && $7 == %d && ($5 == %s || $4 == \"dense\")' '%s'", \
                  m, P, density, datafile)
plot for [i=1:nmethods] rows(word(methods, i)) using (column(xcol)):($16 * 100) \
     with linespoints ls mls(word(methods, i)) title mtit(word(methods, i))
