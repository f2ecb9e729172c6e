# train_final.gp - each sparsifier's test accuracy after the same number of iterations,
# against the worker count, at one density (dense, which runs once per P, included).
# Variables (gnuplot -e): term, outfile, plotdir, datafile (a deftsim train final.csv),
# methods, density, pmin, pmax, subtitle.
figtitle = "Test accuracy at equal iterations vs number of workers"
omitted = ""
load plotdir."/style.gp"
set ylabel "test accuracy after the last iteration (%)"
set datafile separator ","
# final.csv columns: 4 method, 5 density, 7 P, 13 test_accuracy
rows(m) = sprintf("< awk -F, 'NR > 1 && $4 == \"%s\" && ($5 == %s || $4 == \"dense\")' '%s'", \
                  m, density, datafile)
plot for [i=1:nmethods] rows(word(methods, i)) using ($7 * dodge(i)):($13 * 100) \
     with linespoints ls mls(word(methods, i)) title mtit(word(methods, i))
