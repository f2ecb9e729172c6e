# breakdown.gp - where the time of an iteration goes, per sparsifier, at a few worker counts.
# datafile: one block per worker count (the words of `plist`), one row per method:
#   "method selection other communication" in milliseconds, means over the iterations
# (means, so that the parts add up to the whole). With the network simulation the whole is the
# simulated iteration: communication (the collectives' time), the slowest worker's selection and
# the rest (other compute, waiting). Without it (have_comm = 0) the whole is the slowest
# worker's compute time: its selection and the other phases.
# Extra variables: plist (worker counts of the blocks), have_comm (0 or 1).
figtitle = "Where the time of an iteration goes"
load plotdir."/style.gp"
unset logscale x
unset mxtics
unset arrow
set ylabel "time per iteration (ms), mean over iterations"
set xlabel ""
set grid noxtics nomxtics ytics mytics
set style data histograms
set style histogram rowstacked title textcolor rgb "#222222" font ",14" offset 0,-1.5
set style fill solid 0.85 border rgb "#333333"
set boxwidth 0.75 relative
set xtics rotate by -45 left noenhanced font ",12" scale 0
set bmargin 9
set yrange [0:*]
set key inside left top vertical Left reverse noenhanced box opaque
set rmargin 4
cmd = "plot "
do for [b = 1:words(plist)] {
    sep = (b > 1) ? ", " : ""
    t1 = (b == 1) ? "title \"selection\"" : "notitle"
    t2 = (b == 1) ? (have_comm ? "title \"other compute and waiting\"" : "title \"other compute\"") : "notitle"
    t3 = (b == 1) ? "title \"communication\"" : "notitle"
    cmd = cmd . sep . sprintf("newhistogram \"P = %s\", datafile index %d using 2:xtic(1) %s lc rgb \"#D55E00\", '' index %d using 3 %s lc rgb \"#BBBBBB\"", word(plist, b), b - 1, t1, b - 1, t2)
    if (have_comm) {
        cmd = cmd . sprintf(", '' index %d using 4 %s lc rgb \"#0072B2\"", b - 1, t3)
    }
}
eval cmd
