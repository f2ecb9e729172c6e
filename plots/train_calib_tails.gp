# train_calib_tails.gp - the tail of the gradient values: P(|g| / RMS of its layer > x) over
# the weight tensors' elements (scripts/trace_stats.py's tails.csv), recorded against
# synthetic. Variables: term, outfile, plotdir, datafile (tails.csv), series
# (label@iteration items), subtitle.
figtitle = "Tails of the gradient values: recorded vs synthetic"
methods = ""
omitted = ""
load plotdir."/style.gp"
set logscale x 10
set xrange [0.4:40]
set xlabel "x = |g| / (RMS of the element's layer)"
set logscale y 10
set format y "10^{%L}"
set yrange [1e-7:1]
set ylabel "P(|g| / RMS > x)  over the weights' elements"
set datafile separator ","
item(i) = word(series, i)
lab(i) = item(i)[1:strstrt(item(i), "@") - 1]
its(i) = item(i)[strstrt(item(i), "@") + 1:]
rows(i) = sprintf("< awk -F, 'NR > 1 && $1 == \"%s\" && $3 == %s && $5 > 0' '%s'", lab(i), its(i), datafile)
tit(i) = (its(i) eq "0" && strstrt(lab(i), "recorded") == 0) ? lab(i) : sprintf("%s, iteration %s", lab(i), its(i))
plot for [i=1:words(series)] rows(i) using 4:5 with linespoints ls i title tit(i)
