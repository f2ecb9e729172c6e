# breakdown.gp - where the time of an iteration goes, per sparsifier, at a few worker counts.
# datafile: one block per worker count (the words of `plist`), one row per method:
#   "method <part> <part> ..." in milliseconds, means over the iterations (means, so that the
# parts add up to the whole), the parts named by the words of `parts`:
#   - a compute phase of the slowest worker (norms, allocate, pack, sample, filter, select, merge,
#     union, gather, sum, residual, other; summary.csv phase_<name>_seconds_mean);
#   - waiting: the rest of the simulated iteration outside communication (other workers' compute
#     on the critical path, skew);
#   - comm: communication (comm_seconds_mean);
#   - selection, rest: a summary.csv without phase columns: the slowest worker's selection and
#     the rest (other compute and waiting);
#   - fwdbwd: with [compute], the training step's forward and backward pass (first); comm is then
#     the communication the backward pass did not hide.
# With the network simulation (have_comm = 1) the whole is the simulated iteration: the
# sparsifier's compute and the collectives, and with [compute] (fwdbwd = 1) the forward and
# backward pass; without [compute] no forward and backward pass. Without the network simulation
# the whole is the slowest worker's compute time.
# After the parts, a last column: 1 where summary.csv flags the point noisy; its bar's label
# then ends in "(noisy)".
# Extra variables: plist (worker counts of the blocks), parts, have_comm (0 or 1), phases (0/1),
# fwdbwd (0/1).
if (!exists("fwdbwd")) fwdbwd = 0
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
set xtics rotate by -40 left noenhanced font ",12" scale 0
set bmargin 8
set yrange [0:*]
unset key
set key at screen 0.755, graph 1 left top vertical Left reverse noinvert noenhanced nobox \
    samplen 1.5 spacing 1.15 width 1 maxrows auto font ",12"
set rmargin at screen 0.74

# Colours: the selection phases warm (DEFT's norm pass the darkest), data movement around the
# collectives green and grey, waiting white, communication blue as in the other figures.
pcol(p) = (p eq "norms") ? "#67000D" : (p eq "allocate") ? "#CB181D" : (p eq "pack") ? "#D94801" : \
          (p eq "sample") ? "#FDD0A2" : (p eq "filter") ? "#FD8D3C" : (p eq "select") ? "#E69F00" : \
          (p eq "selection") ? "#D55E00" : (p eq "merge") ? "#CC79A7" : (p eq "union") ? "#A1D99B" : \
          (p eq "gather") ? "#41AB5D" : (p eq "sum") ? "#006D2C" : (p eq "residual") ? "#969696" : \
          (p eq "other") ? "#D9D9D9" : (p eq "rest") ? "#BBBBBB" : (p eq "waiting") ? "#FFFFFF" : \
          (p eq "comm") ? "#0072B2" : (p eq "fwdbwd") ? "#6A51A3" : "#000000"
issel(p) = (p eq "norms" || p eq "allocate" || p eq "pack" || p eq "sample" || p eq "filter" || \
            p eq "select" || p eq "merge" || p eq "selection")
ptit(p) = (p eq "comm") ? (fwdbwd ? "communication (not hidden)" : "communication") : \
          (p eq "fwdbwd") ? "forward + backward" : \
          (p eq "waiting") ? "waiting (others' compute)" : \
          (p eq "rest") ? (have_comm ? "other compute and waiting" : "other compute") : \
          (p eq "other") ? "other compute phases" : \
          (issel(p) && p ne "selection") ? p." (selection)" : p
# What the bar holds, under the title.
if (have_comm) {
    set label 92 (fwdbwd ? "the training step: forward and backward pass as given by [compute], sparsifier compute, communication" \
                         : "sparsifier compute and communication only: no forward and backward pass (not modelled)") \
        at screen 0.5, screen note_y center noenhanced font ",12" tc rgb "#222222"
}
if (phases) {
    set label 93 "compute: the phases of the slowest worker (largest compute time), by name" \
        at screen 0.5, screen note_y - (have_comm ? 0.035 : 0) center noenhanced font ",12" tc rgb "#222222"
    set tmargin 8 + cond_margin
}
np = words(parts)
cmd = "plot "
do for [b = 1:words(plist)] {
    do for [c = 1:np] {
        sep = (b > 1 || c > 1) ? ", " : ""
        p = word(parts, c)
        tt = (b == 1) ? sprintf("title \"%s\"", ptit(p)) : "notitle"
        head = (c == 1) ? sprintf("newhistogram \"P = %s\", datafile index %d using 2:xtic(mshort(strcol(1)).(column(%d) > 0 ? ' (noisy)' : ''))", word(plist, b), b - 1, np + 2) \
                        : sprintf("'' index %d using %d", b - 1, c + 1)
        cmd = cmd . sep . sprintf("%s %s lc rgb \"%s\"", head, tt, pcol(p))
    }
}
eval cmd
