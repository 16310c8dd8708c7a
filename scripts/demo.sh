#!/usr/bin/env bash
# demo.sh: runs tracegen on the bundled capture at 0, 0.1% and 1% loss and
# prints, for each, LDA's per-epoch estimate beside the ground truth.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/retry.sh 300 3 go mod download
out=${DEMO_DIR:-$(mktemp -d)}
go build -o "$out/bin/" ./cmd/tracegen ./cmd/evaluate
for loss in 0 0.001 0.01; do
  echo
  echo "=== loss $loss: Weibull delays (shape 0.65, scale 50µs, base 20µs), LDA 2 banks × 1024 rows, 1s epochs"
  "$out/bin/tracegen" -in testdata/trace.pcap -out "$out/loss-$loss" -loss "$loss" -seed 1
  "$out/bin/evaluate" -prefix "$out/loss-$loss"
done
echo
echo "captures and ground truth are in $out"
