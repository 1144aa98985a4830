# The chart of bench/RESULTS.md: six panels from the data files bench/peers_bench.lua writes
# (one row per group, then median, min, max per series; the first row names the series).
#   gnuplot build/bench/results/vars.gp bench/results.gp
# vars.gp (written by peers_bench.lua) sets datadir, out, big, small, events and sub1..sub6, the
# one-line verdicts under the panel titles.

if (!exists("datadir")) datadir = "build/bench/results"
if (!exists("out")) out = "bench/results.png"
if (!exists("big")) big = "100k pods"
if (!exists("small")) small = "10k pods"
if (!exists("events")) events = "200,000"
if (!exists("sub1")) sub1 = ""
if (!exists("sub2")) sub2 = ""
if (!exists("sub3")) sub3 = ""
if (!exists("sub4")) sub4 = ""
if (!exists("sub5")) sub5 = ""
if (!exists("sub6")) sub6 = ""

set terminal pngcairo size 2100,1260 font "DejaVu Sans,11" noenhanced
set output out
set datafile missing "NaN"
set style data histograms
set style histogram errorbars gap 1 lw 1
set style fill solid 0.85 border rgb "#333333"
set boxwidth 0.92
set grid ytics lc rgb "#dddddd"
set key top left samplen 1.5 spacing 0.95 font ",9" opaque
set offsets 0, 0, graph 0.3, 0   # head room for the key above the tallest bar
set xtics nomirror scale 0 font ",10"
set ytics nomirror
set border 3

# Floors grey, kinformer blues and greens, client-node red.
s1_colors = "#9e9e9e #616161 #1565c0 #64b5f6 #2e7d32 #81c784 #ef9a9a #d32f2f"
s1r_colors = "#1565c0 #64b5f6 #2e7d32 #81c784 #ef9a9a #d32f2f"
s2_colors = "#90caf9 #1565c0 #64b5f6 #ef9a9a #d32f2f"
two_colors = "#1565c0 #d32f2f"
s4_colors = "#90a4ae #37474f"


set multiplot layout 2,3 title sprintf("kinformer vs @kubernetes/client-node vs the floor (median, bars: min-max; %s)", big) font ",14"

# 1. S1 time to synced
f = datadir . "/s1_time.dat"
stats f using 0 nooutput
n = int((STATS_columns - 1) / 3)  # group, then (median, min, max) per series
set title "S1 initial sync: time to synced (s, log scale, lower is better)\n" . sub1
set logscale y
set ylabel "seconds"
plot for [i=0:n-1] f using (column(2+3*i)):(column(3+3*i)):(column(4+3*i)):xtic(1) \
     title columnhead(2+3*i) lc rgb word(s1_colors, i+1)

# 2. S1 peak RSS
f = datadir . "/s1_rss.dat"
stats f using 0 nooutput
n = int((STATS_columns - 1) / 3)  # group, then (median, min, max) per series
set title "S1 initial sync: peak RSS (MB, log scale, lower is better)\n" . sub2
set ylabel "MB"
plot for [i=0:n-1] f using (column(2+3*i)):(column(3+3*i)):(column(4+3*i)):xtic(1) \
     title columnhead(2+3*i) lc rgb word(s1r_colors, i+1)

# 3. S2 events/s
f = datadir . "/s2_rate.dat"
stats f using 0 nooutput
n = int((STATS_columns - 1) / 3)  # group, then (median, min, max) per series
set title sprintf("S2 burst of %s MODIFIED events: thousand events/s (higher is better)\n", events) . sub3
unset logscale y
set yrange [0:*]
set ylabel "thousand events/s"
plot for [i=0:n-1] f using (column(2+3*i)):(column(3+3*i)):(column(4+3*i)):xtic(1) \
     title columnhead(2+3*i) lc rgb word(s2_colors, i+1)
set yrange [*:*]

# 4. S2 handler latency
f = datadir . "/s2_latency.dat"
set title sprintf("S2 handler latency at %s (ms, log scale, lower is better)\n", small) . sub4
set logscale y
set ylabel "ms"
plot for [i=0:1] f using (column(2+3*i)):(column(3+3*i)):(column(4+3*i)):xtic(1) \
     title columnhead(2+3*i) lc rgb word(two_colors, i+1)

# 5. S3 lookups
f = datadir . "/s3.dat"
set title sprintf("S3 lookups at %s (million/s, log scale, higher is better)\n", big) . sub5
set ylabel "million per second"
plot for [i=0:1] f using (column(2+3*i)):(column(3+3*i)):(column(4+3*i)):xtic(1) \
     title columnhead(2+3*i) lc rgb word(two_colors, i+1)

# 6. S4 relist
f = datadir . "/s4.dat"
set title sprintf("S4 relist after a 410 at %s: RSS (MB, lower is better)\n", big) . sub6
unset logscale y
set yrange [0:*]
set ylabel "MB"
plot for [i=0:1] f using (column(2+3*i)):(column(3+3*i)):(column(4+3*i)):xtic(1) \
     title columnhead(2+3*i) lc rgb word(s4_colors, i+1)

unset multiplot
