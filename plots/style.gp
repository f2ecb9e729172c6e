# style.gp - what every deftsim figure shares: terminal, fonts, colours, one line style per
# sparsifier (the same colour and marker in every figure), axes and the note under the title.
#
# `deftsim plot` sets these variables with -e before running a figure's script:
#   term       png, svg or pdf
#   outfile    the image to write
#   datafile   the figure's data (written by deftsim plot from summary.csv)
#   plotdir    this folder (to load this file)
#   methods    the sparsifiers in the data, one per data block, space-separated
#   subtitle   model, density, iterations, what the error bars are
#   omitted    methods left out of a logarithmic axis (no positive value), or ""
#   conditions the network (preset, collective library and algorithm, network model), and
#   compute_note  where the compute phases were timed (this machine's CPU and its model, or a
#              device profile), from the results' manifest (src/engine/conditions.c); "" for a
#              folder without a manifest
#   nnoisy     points of the figure flagged noisy (summary.csv `noisy`); the line figures'
#              data then hold a fifth column, 1 on those points (0 or absent: none)
#   pmin, pmax the smallest and largest worker count in the figure
# and a figure may get more (docs/ANALYSIS.md, plots/README.md).

if (term eq "png") {
    set terminal pngcairo size 1200,760 enhanced font "DejaVu Sans,14" linewidth 1.6 background "#ffffff"
} else {
    if (term eq "svg") {
        set terminal svg size 1200,760 dynamic enhanced font "DejaVu Sans,14" linewidth 1.6 background "#ffffff"
    } else {
        set terminal pdfcairo size 8in,5in enhanced font "DejaVu Sans,10" linewidth 1.2
    }
}
set output outfile
set encoding utf8

# Colours: a colour-blind-safe palette (Okabe-Ito), DEFT in vermillion; markers differ too, so
# the figures read in grey.
# The methods come from deftsim's registry (sparsifiers/registry.c): `deftsim plot` passes
# mreg_name, mreg_style (the method's line style: its registry position + 1, skipping 8),
# mreg_title (the legend), mreg_short (a bar's label) and the style itself, mreg_lc (colour),
# mreg_pt (marker), mreg_ps, mreg_lw, mreg_dt, one entry per method (src/cli/gnuplot.c assigns
# them from the position). Style 8 is the style of a name the registry does not hold.
if (!exists("mreg_name")) { array mreg_name[1] = [""]; array mreg_style[1] = [8]; \
                            array mreg_title[1] = [""]; array mreg_short[1] = [""]; \
                            array mreg_lc[1] = ["#000000"]; array mreg_pt[1] = [1]; \
                            array mreg_ps[1] = [1.3]; array mreg_lw[1] = [1.5]; array mreg_dt[1] = [1] }
do for [i=1:|mreg_name|] {
    set style line mreg_style[i] lc rgb mreg_lc[i] pt mreg_pt[i] ps mreg_ps[i] lw mreg_lw[i] dt mreg_dt[i]
}
set style line 8 lc rgb "#000000" pt 1  ps 1.3 lw 1.5 dt 1
# Each style's marker (pt above), for figures that draw a second line in open markers.
ls_max = 8
do for [i=1:|mreg_name|] { if (mreg_style[i] > ls_max) { ls_max = mreg_style[i] } }
array ls_pt[ls_max]
ls_pt[8] = 1
do for [i=1:|mreg_name|] { ls_pt[mreg_style[i]] = mreg_pt[i] }

# Line style and legend title of a method: the registry's, style 8 and its name for a name the
# registry does not hold.
mreg_n = |mreg_name|
mreg_at(m, i) = (i > mreg_n) ? 0 : (mreg_name[i] eq m) ? i : mreg_at(m, i + 1)
mls(m) = (mreg_at(m, 1) > 0) ? mreg_style[mreg_at(m, 1)] : 8
mtit(m) = (mreg_at(m, 1) > 0) ? mreg_title[mreg_at(m, 1)] : m
# The same names, short enough for a bar's label (the breakdown).
mshort(m) = (mreg_at(m, 1) > 0) ? mreg_short[mreg_at(m, 1)] : m
nmethods = words(methods)

set grid xtics ytics mytics lc rgb "#dddddd" lw 1 dt 1, lc rgb "#eeeeee" lw 1 dt 1
set border 3 lc rgb "#333333"
set tics nomirror out scale 0.7
set key outside below center horizontal Left reverse noenhanced samplen 2.5 spacing 1.1 width 1 maxrows 3 box lc rgb "#cccccc"
set errorbars small
set bars 1.5
set rmargin 4
set bmargin 9

# Worker counts on a base-2 axis, labelled with the counts themselves.
set logscale x 2
set format x "%g"
# pmin, pmax: the smallest and largest P of the data; a margin of a factor 1.3 on each side
# leaves room for the dodge below.
if (exists("pmin") && exists("pmax")) { set xrange [pmin / 1.3 : pmax * 1.3] }
set xlabel "workers P"
unset mxtics

# The title (figtitle, set by the figure's script before loading this file) and the notes
# under it: model, density, sample, what the bars show; then the conditions (network, where
# compute was timed); plain text. note_y: where a figure's own note (label 92, 93) goes, below
# these; each note line takes 0.035 of the screen.
if (!exists("conditions")) conditions = ""
if (!exists("compute_note")) compute_note = ""
if (!exists("nnoisy")) nnoisy = 0
set label 89 figtitle at screen 0.5, screen 0.965 center font ",18"
set label 90 subtitle at screen 0.5, screen 0.925 center noenhanced font ",12" tc rgb "#444444"
note_y = 0.89
# cond_lines: the lines the conditions take; a figure that sets its own top margin adds
# cond_margin (1.6 characters a line) to it.
cond_lines = 0
if (strlen(conditions) > 0) {
    set label 87 conditions at screen 0.5, screen note_y center noenhanced font ",11" tc rgb "#444444"
    note_y = note_y - 0.035
    cond_lines = cond_lines + 1
}
if (strlen(compute_note) > 0) {
    set label 88 compute_note at screen 0.5, screen note_y center noenhanced font ",11" tc rgb "#444444"
    note_y = note_y - 0.035
    cond_lines = cond_lines + 1
}
cond_margin = 1.6 * cond_lines
set tmargin 6 + cond_margin
if (strlen(omitted) > 0) {
    set label 91 sprintf("not shown (no positive value on this axis): %s", omitted) \
        at screen 0.5, screen note_y center noenhanced font ",11" tc rgb "#666666"
    note_y = note_y - 0.035
}

# Labels at 2 and 5 times each power of ten too, when the data span less than three decades, so
# that a log10 axis over one decade still has labelled ticks: `eval logy_labels` after `set
# logscale y 10`. Columns 3 and 4 are the bars' ends: their range is the figure's. stats reads
# them as x and y, so the worker axis's range is lifted while it runs.
# The axis fits the data: from the lowest bar end over 1.25 to the highest times 1.25, not the
# whole decades autoscaling rounds out to (data from 3 to 95 ms would span 1 to 1000 ms).
logy_labels = "set xrange [*:*]; stats datafile using 3:4 nooutput; set yrange [STATS_min_x / 1.25 : STATS_max_y * 1.25]; if (STATS_max_y / STATS_min_x < 1000) { do for [e = -12:12] { set ytics add (sprintf('%g', 2 * 10.0**e) 2 * 10.0**e 0, sprintf('%g', 5 * 10.0**e) 5 * 10.0**e 0) } }; if (exists('pmin') && exists('pmax')) { set xrange [pmin / 1.3 : pmax * 1.3] }"

# A line figure: one curve per method, markers at each P, bars from the confidence interval of
# the median (columns: P, median, lo, hi). Each method is drawn a little to the side of its P
# (a factor of 2^(+-0.1) at most) so that bars at one P do not hide each other; the axis
# labels stay at the true P.
dodge(i) = nmethods > 1 ? 2**(0.2 * ((i - 1.0) / (nmethods - 1) - 0.5)) : 1
# Points flagged noisy (nnoisy > 0; column 5 = 1) get a large open black circle around their
# marker, and the key an entry "noisy"; noisy_layer is that part of a plot command.
noisy_layer = (nnoisy > 0) ? ", for [i=1:nmethods] datafile index (i-1) using ($1*dodge(i)):(column(5) > 0 ? $2 : NaN) with points pt 6 ps 3.4 lw 1.4 lc rgb '#000000' notitle, keyentry with points pt 6 ps 2.2 lw 1.4 lc rgb '#000000' title 'noisy (summary.csv)'" : ""
# The key's extra row.
if (nnoisy > 0) { set bmargin (nmethods >= 10 ? 11 : 10) }
plot_lines = "plot for [i=1:nmethods] datafile index (i-1) using ($1*dodge(i)):2:3:4 with yerrorlines ls mls(word(methods,i)) title mtit(word(methods,i))" . noisy_layer
