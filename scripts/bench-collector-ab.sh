#!/usr/bin/env bash
# bench-collector-ab.sh: compares two collector builds under owl-load by
# running them at the same time, each with its own owl-load on its own
# ports, so that the machine's swings (a third within the hour on shared
# machines) fall on both. Each collector gets PATHS paths at 1 s epochs
# for EPOCHS epochs; the table gives each one's CPU (user + system, from
# /proc) between FROM and TO seconds after its start, that CPU per
# path-epoch, its garbage collector's marking in the same window
# (GODEBUG=gctrace=1: assist + background), the results owl-load found
# exact, the median latency of the last third and the collector's peak
# resident memory (VmHWM, with the store's mapped pages). Two runs of one build
# differ by a few percent: repeat, and compare ratios.
#   usage: scripts/bench-collector-ab.sh BIN_A BIN_B [PATHS [EPOCHS [FROM TO]]]
# BIN_A and BIN_B are directories holding collector and owl-load (go build
# -o DIR/ ./cmd/collector ./cmd/owl-load); ports 7720-7721 and 7730-7731.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
[ $# -ge 2 ] || { sed -n '2,15p' "$0"; exit 2; }
a=$1 b=$2 paths=${3:-700} epochs=${4:-45} from=${5:-20} to=${6:-40}
dir=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
hz=$(getconf CLK_TCK)

# run BIN NAME PORT: one collector and its owl-load; writes DIR/NAME.*.
run() {
  local bin=$1 name=$2 port=$3 w=$dir/$2
  mkdir -p "$w"
  load_config "$bin" "$w" "$paths" "$port"
  GODEBUG=gctrace=1 "$bin/collector" -config "$w/c.yaml" -log-level error 2>"$w/gc.log" &
  local coll=$!
  wait_metrics $((port + 1))
  (sleep "$from"; cpu_ticks $coll >"$w/cpu1"
    sleep $((to - from)); cpu_ticks $coll >"$w/cpu2") &
  local window=$!
  "$bin/owl-load" -collector "127.0.0.1:$port" -paths "$paths" -epochs "$epochs" -rate 1 -log-level error -out json >"$w/load.json" 2>/dev/null
  wait $window
  awk '/^VmHWM/ {print $2}' "/proc/$coll/status" >"$w/hwm"
  kill -INT $coll
  wait $coll 2>/dev/null || true
}
run "$a" A 7720 &
run "$b" B 7730 &
wait

echo "| build | CPU ${from}-${to} s | ms per path-epoch | GC marking | exact | last third p50 | peak RSS |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for name in A B; do
  w=$dir/$name
  cpu=$(echo "($(cat "$w/cpu2") - $(cat "$w/cpu1")) / $hz" | bc -l)
  mark=$(awk -v f="$from" -v t="$to" '$1 == "gc" {
      at = substr($3, 2) + 0; split($8, c, "[+/]")
      if (at >= f && at <= t) s += c[2] + c[3] }
    END { printf "%.2f", s / 1000 }' "$w/gc.log")
  python3 - "$w/load.json" "$name" "$cpu" "$mark" "$paths" "$((to - from))" "$(cat "$w/hwm")" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
name, cpu, mark, paths, secs, hwm = sys.argv[2], float(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
print(f"| {name} | {cpu:.2f} s | {1000 * cpu / (paths * secs):.3f} | {mark} s | {d['exact']}/{d['results']} | {d['latency_last_third_p50_seconds']:.2f} s | {hwm / 1024:.0f} MiB |")
PY
done
