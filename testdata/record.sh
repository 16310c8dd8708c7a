#!/usr/bin/env bash
# record.sh records testdata/trace.pcap: real TCP and UDP traffic (HTTP bulk
# and request/response, DNS, a UDP stream) between two network namespaces,
# captured with tcpdump at one point. Needs root, iproute2, ethtool, tcpdump.
#   usage: testdata/record.sh [seconds] [out.pcap]
set -euo pipefail
secs=${1:-5}
out=${2:-$(dirname "$0")/trace.pcap}
a=owl-rec-a b=owl-rec-b
cleanup() { ip netns del $a 2>/dev/null || true; ip netns del $b 2>/dev/null || true; }
trap cleanup EXIT
cleanup
ip netns add $a; ip netns add $b
ip link add veth-a netns $a type veth peer name veth-b netns $b
ip -n $a addr add 10.99.0.1/24 dev veth-a; ip -n $b addr add 10.99.0.2/24 dev veth-b
ip -n $a -6 addr add fd99::1/64 dev veth-a nodad; ip -n $b -6 addr add fd99::2/64 dev veth-b nodad
for ns in $a $b; do ip -n $ns link set lo up; done
ip -n $a link set veth-a up; ip -n $b link set veth-b up
# Real wire-sized packets with real checksums: no segmentation or checksum offload.
ip netns exec $a ethtool -K veth-a tso off gso off gro off tx off rx off >/dev/null
ip netns exec $b ethtool -K veth-b tso off gso off gro off tx off rx off >/dev/null
# A rate limit on the server's egress so that queues form under the bulk flows.
ip netns exec $b tc qdisc add dev veth-b root tbf rate 40mbit burst 32kb latency 50ms

bin=$(mktemp -d)
(cd "$(dirname "$0")/.." && go build -o "$bin/trafficgen" ./e2e/trafficgen)
ip netns exec $b "$bin/trafficgen" -mode server & srv=$!
sleep 0.5
ip netns exec $b tcpdump -q -i veth-b --time-stamp-precision nano -s 160 -w "$out" & dump=$!
sleep 0.5
ip netns exec $a "$bin/trafficgen" -mode client -server 10.99.0.2 -duration "${secs}s" \
  -bulk-flows 3 -bulk-rate 1500000 -rr-rate 150 -dns-rate 400 -udp-rate 600 &
ip netns exec $a "$bin/trafficgen" -mode client -server fd99::2 -duration "${secs}s" \
  -bulk-flows 1 -bulk-rate 300000 -rr-rate 20 -dns-rate 50 -udp-rate 100 &
wait %3 %4
sleep 0.5
kill $dump $srv; wait $dump $srv 2>/dev/null || true
rm -rf "$bin"
echo "recorded $out: $(tcpdump -r "$out" 2>/dev/null | wc -l) packets, $(stat -c %s "$out") bytes"
