#!/usr/bin/env bash
# bench-replay.sh: whole-process cost of the probe and the collector on
# capture files read at full speed. tracegen makes two pairs of captures
# with 1% loss: "small", the bundled trace 20 times over, one copy every
# 6 s (about 4,300 packets per 1 s epoch, 515 k packets), and "dense",
# 600,000 synthetic flows over 4 s (about 900 k packets per epoch, 3.65 M
# packets). For each, a collector and two probes run as processes; the
# table gives each process's CPU time (user + system), the probes'
# packets per CPU-second, the collector's CPU per path-epoch and its peak
# memory.
#   usage: scripts/bench-replay.sh [bin dir: prebuilt collector, probe, tracegen]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
dir=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
bin=${1:-}
if [ -z "$bin" ]; then
  bin=$dir/bin
  go build -o "$bin/" ./cmd/collector ./cmd/probe ./cmd/tracegen
fi
"$bin/tracegen" -in testdata/trace.pcap -repeat 20 -repeat-every 6s -loss 0.01 -out "$dir/small" >/dev/null
"$bin/tracegen" -synth-flows 600000 -synth-span 4s -loss 0.01 -out "$dir/dense" >/dev/null

# cpu PID: user + system seconds of a live process.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14+$15)/hz}' "/proc/$1/stat"; }
# peak PID: peak resident memory of a live process, MiB.
peak() { awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$1/status"; }
# tcpu FILE: user + system seconds that /usr/bin/time wrote.
tcpu() { awk '{printf "%.2f", $1+$2}' "$1"; }

printf "%-6s %10s %8s %10s %8s %10s %12s %10s %10s\n" capture packets epochs "probe-a s" "Mpkt/s" "probe-b s" "collector s" "ms/epoch" "peak MiB"
for name in small dense; do
  start_collector "$bin/collector" "$dir" a b
  /usr/bin/time -f "%U %S" -o "$dir/ta" "$bin/probe" -id a -collector "$grpc" -insecure -file "$dir/$name-up.pcap" -replay-speed 0 -log-level error &
  pa=$!
  /usr/bin/time -f "%U %S" -o "$dir/tb" "$bin/probe" -id b -collector "$grpc" -insecure -file "$dir/$name-down.pcap" -replay-speed 0 -log-level error
  wait $pa
  ccpu=$(cpu $coll) cpeak=$(peak $coll)
  kill $coll; wait $coll 2>/dev/null || true
  packets=$(awk -F, 'NR > 1' "$dir/$name-truth.csv" | wc -l)
  epochs=$(awk -F, 'NR > 1 {print int($3 / 1e9)}' "$dir/$name-truth.csv" | sort -u | wc -l)
  a=$(tcpu "$dir/ta") b=$(tcpu "$dir/tb")
  awk -v n=$name -v p=$packets -v e=$epochs -v a=$a -v b=$b -v c=$ccpu -v m=$cpeak \
    'BEGIN {printf "%-6s %10d %8d %10.2f %8.2f %10.2f %12.2f %10.2f %10s\n", n, p, e, a, p/a/1e6, b, c, 1000*c/e, m}'
done
