# train_calib_buildup.gp - top-k gradient build-up |U| / k against the number of workers
# whose top-k sets are united, for recorded and synthetic traces (scripts/trace_stats.py's
# buildup.csv). Variables (gnuplot -e): term, outfile, plotdir, datafile (buildup.csv),
# density (as written in the CSV), series (space-separated label@iteration items, one curve
# each), subtitle.
figtitle = sprintf("Top-k build-up vs workers, density %s: recorded vs synthetic", density)
methods = ""
omitted = ""
load plotdir."/style.gp"
set xrange [0.8:20]
set ylabel "|U| / k  (union of the first P workers' top-k sets)"
set logscale y 2
set format y "%g"
set yrange [0.9:20]
set datafile separator ","
set arrow 1 from 1, 1 to 16, 16 nohead dt 3 lc rgb "#aaaaaa" back
set label 3 "no overlap (|U| = P k)" at 9, 12 rotate by 25 tc rgb "#888888" font ",11"
item(i) = word(series, i)
lab(i) = item(i)[1:strstrt(item(i), "@") - 1]
its(i) = item(i)[strstrt(item(i), "@") + 1:]
rows(i) = sprintf("< awk -F, 'NR > 1 && $1 == \"%s\" && $3 == %s && $4 == %s' '%s'", \
                  lab(i), its(i), density, datafile)
tit(i) = (its(i) eq "0" && strstrt(lab(i), "recorded") == 0) ? lab(i) : sprintf("%s, iteration %s", lab(i), its(i))
plot for [i=1:words(series)] rows(i) using 6:7 with linespoints ls i title tit(i)
