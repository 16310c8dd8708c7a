#!/usr/bin/env bash
# bench-collector-core.sh: what one core of collector holds, settled. The
# collector runs pinned to the last CPU (taskset), owl-load to CPU 0, with
# PATHS paths at 1 s epochs: a warm-up of 20 epochs sizes the paths, 20 s
# let the backlog drain, then a measured run of EPOCHS epochs. It prints
# one table row: path-epochs reconciled a second (kept up: as many as
# offered, about PATHS), report → queryable latency, the share of its core
# the collector used, its CPU per path-epoch (user + system, /proc), the
# results owl-load found exact, and the collector's peak resident memory
# (VmHWM, the store's mapped pages included). PROFILE=FILE also takes 20 s
# of CPU profile, 15 s into a measured run of 35 epochs or more. Runs of
# one build differ by a tenth or more on shared machines: alternate
# builds, repeat.
#   usage: scripts/bench-collector-core.sh BIN PATHS [EPOCHS]
# BIN is a directory holding collector and owl-load (go build -o DIR/
# ./cmd/collector ./cmd/owl-load); ports 7740-7741.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
[ $# -ge 2 ] || { sed -n '2,16p' "$0"; exit 2; }
bin=$1 paths=$2 epochs=${3:-60}
cpus=$(nproc)
[ "$cpus" -ge 2 ] || { echo "needs two CPUs: one for the collector, one for owl-load" >&2; exit 2; }
dir=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
hz=$(getconf CLK_TCK)

load_config "$bin" "$dir" "$paths" 7740
[ -n "${PROFILE:-}" ] && echo "pprof: true" >>"$dir/c.yaml"
taskset -c $((cpus - 1)) "$bin/collector" -config "$dir/c.yaml" -log-level error 2>"$dir/err" &
coll=$!
wait_metrics 7741
load() {
  taskset -c 0 "$bin/owl-load" -collector 127.0.0.1:7740 -paths "$paths" -rate 1 -log-level error "$@"
}
echo "warm-up: 20 epochs, then 20 s" >&2
load -epochs 20 >/dev/null 2>&1
sleep 20
if [ -n "${PROFILE:-}" ]; then
  (sleep 15; curl -s -o "$PROFILE" "http://127.0.0.1:7741/debug/pprof/profile?seconds=20") &
fi
echo "measured: $epochs epochs" >&2
c1=$(cpu_ticks $coll); t1=$(date +%s.%N)
load -epochs "$epochs" -out json >"$dir/load.json" 2>/dev/null
c2=$(cpu_ticks $coll); t2=$(date +%s.%N)
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$coll/status")
kill -INT $coll
wait $coll 2>/dev/null || true

echo "| paths | path-epochs/s | p50 | p99 | core | ms per path-epoch | exact | peak RSS |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
python3 - "$dir/load.json" "$c1" "$c2" "$t1" "$t2" "$hz" "$paths" "$hwm" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c1, c2, t1, t2, hz = map(float, sys.argv[2:7])
paths, hwm = int(sys.argv[7]), int(sys.argv[8])
cpu = (c2 - c1) / hz
n = d["results"]
print(f"| {paths} | {d['reconciled_per_second']:.0f} | {d['latency_p50_seconds']:.2f} s | {d['latency_p99_seconds']:.2f} s "
      f"| {cpu / (t2 - t1):.2f} | {1000 * cpu / max(n, 1):.3f} | {d['exact']}/{n} | {hwm / 1048576:.2f} GiB |")
PY
