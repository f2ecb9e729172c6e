# train_calib_layers.gp - each tensor's gradient RMS (per element; the median over workers),
# recorded against synthetic traces of the same model table (scripts/trace_stats.py's
# layers.csv). Variables: term, outfile, plotdir, datafile (layers.csv), series
# (label@iteration items), subtitle.
figtitle = "Per-tensor gradient scale: recorded vs synthetic"
methods = ""
omitted = ""
load plotdir."/style.gp"
unset logscale x
set xrange [-0.5:*]
set xlabel "tensor, in parameter order"
set xtics rotate by -30
set rmargin 10
set bmargin 11
set logscale y 10
set format y "10^{%L}"
set ylabel "RMS of the gradient's elements"
set datafile separator ","
item(i) = word(series, i)
lab(i) = item(i)[1:strstrt(item(i), "@") - 1]
its(i) = item(i)[strstrt(item(i), "@") + 1:]
rows(i) = sprintf("< awk -F, 'NR > 1 && $1 == \"%s\" && $3 == %s' '%s'", lab(i), its(i), datafile)
tit(i) = (its(i) eq "0" && strstrt(lab(i), "recorded") == 0) ? lab(i) : sprintf("%s, iteration %s", lab(i), its(i))
plot for [i=1:words(series)] rows(i) using 4:9:xtic(5) with linespoints ls i title tit(i)
