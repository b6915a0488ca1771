# Shared by the boot benchmarks (run.sh, install.sh): sourced, not run.
# ms_between T0 T1: milliseconds between two `date +%s.%N` readings, one decimal.
ms_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) * 1000 }'; }
# median: the median of the numbers on stdin, one per line.
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
