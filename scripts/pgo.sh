#!/usr/bin/env bash
# pgo.sh: records the CPU profiles that `go build` uses to optimize the
# probe and the collector (profile-guided optimization reads each main
# package's default.pgo).
# - probe: tracegen makes a dense pair of captures (600,000 synthetic flows
#   over 4 s, 1% loss, about 3.6 M packets a side); a collector and two
#   probes run on them at full speed, three times, each probe writing a
#   CPU profile; the six are merged into cmd/probe/default.pgo.
# - collector: owl-load's 200 paths at 5,000 packets an epoch, as fast as
#   the collector answers, three times; 10 s of each run's profile (from
#   the collector's /debug/pprof) are merged into cmd/collector/default.pgo.
# Run it again when the hot code changes much; a stale profile costs speed,
# never correctness. Needs curl and free ports 7700 and 7701.
#   usage: scripts/pgo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
dir=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
# Built without a profile, so that the one recorded is not shaped by the
# one it replaces.
go build -pgo=off -o "$dir/bin/" ./cmd/collector ./cmd/probe ./cmd/tracegen ./cmd/owl-load
"$dir/bin/tracegen" -synth-flows 600000 -synth-span 4s -loss 0.01 -out "$dir/dense" >/dev/null
for run in 1 2 3; do
  start_collector "$dir/bin/collector" "$dir" a b
  "$dir/bin/probe" -id a -collector "$grpc" -insecure -file "$dir/dense-up.pcap" -replay-speed 0 \
    -log-level error -cpuprofile "$dir/a$run.prof" &
  pa=$!
  "$dir/bin/probe" -id b -collector "$grpc" -insecure -file "$dir/dense-down.pcap" -replay-speed 0 \
    -log-level error -cpuprofile "$dir/b$run.prof"
  wait $pa
  kill $coll
  wait $coll 2>/dev/null || true
  echo "pgo.sh: probe run $run of 3 recorded" >&2
done
go tool pprof -proto "$dir"/a?.prof "$dir"/b?.prof > cmd/probe/default.pgo 2>/dev/null
echo "pgo.sh: wrote cmd/probe/default.pgo ($(wc -c < cmd/probe/default.pgo) bytes)" >&2

"$dir/bin/owl-load" -paths 200 -write-config "$dir/load.yaml" >/dev/null
sed -i "s|^data_dir: .*|data_dir: $dir/load-data\npprof: true|" "$dir/load.yaml"
for run in 1 2 3; do
  rm -rf "$dir/load-data"
  "$dir/bin/collector" -config "$dir/load.yaml" -log-level error &
  coll=$!
  for _ in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:7701/metrics && break; sleep 0.1; done
  (sleep 3; curl -sf -o "$dir/c$run.prof" "http://127.0.0.1:7701/debug/pprof/profile?seconds=10") &
  prof=$!
  "$dir/bin/owl-load" -collector 127.0.0.1:7700 -paths 200 -epochs 150 -rate 0 -log-level error \
    >"$dir/load.log" 2>&1 || { cat "$dir/load.log" >&2; exit 1; }
  wait $prof
  kill $coll
  wait $coll 2>/dev/null || true
  echo "pgo.sh: collector run $run of 3 recorded" >&2
done
go tool pprof -proto "$dir"/c?.prof > cmd/collector/default.pgo 2>/dev/null
echo "pgo.sh: wrote cmd/collector/default.pgo ($(wc -c < cmd/collector/default.pgo) bytes)" >&2
