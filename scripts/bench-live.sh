#!/usr/bin/env bash
# bench-live.sh: live capture throughput of the probe on a veth pair.
# tcpreplay sends the bundled trace (looped) at rising rates and at top
# speed into one end; then trafgen (netsniff-ng; tcpreplay tops out near
# 340 k packets/s here) sends small UDP packets of 1,000 flows as fast as
# it can. A probe captures the other end with 1 and 2 fanout workers. For
# each run it prints the rate the sender reached, the packets the kernel
# offered the probe's sockets and the ring drops (from the probe's
# /metrics), and the probe's CPU time (user + system, from /proc) over the
# run with its packets per CPU-second. Needs root, iproute2, tcpreplay
# (scripts/deps.sh installs them) and trafgen (installed here if missing).
#   usage: scripts/bench-live.sh [seconds per run]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
secs=${1:-3}
if ! command -v trafgen >/dev/null; then
  DEBIAN_FRONTEND=noninteractive scripts/retry.sh 600 2 apt-get install -y -q --no-install-recommends netsniff-ng >/dev/null
fi
a=owlbencha b=owlbenchb
dir=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; ip link del $a 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
ip link del $a 2>/dev/null || true
ip link add $a type veth peer name $b
for d in $a $b; do
  ip link set $d up
  ethtool -K $d tso off gso off gro off tx off >/dev/null 2>&1 || true
  echo 1 > /proc/sys/net/ipv6/conf/$d/disable_ipv6
done
go build -o "$dir/" ./cmd/collector ./cmd/probe
start_collector "$dir/collector" "$dir" other bench-probe
loops=$(( secs * 20 ))   # the trace is 25,768 frames
# trafgen's packets: UDP from 1,000 source ports, a random IP ID and 64
# random bytes each, so that every packet has an identity of its own.
cat > "$dir/udp.cfg" <<CFG
{
  eth(da=02:00:00:00:00:02, sa=02:00:00:00:00:01),
  ipv4(saddr=10.9.0.1, daddr=10.9.0.2, id=drnd(), ttl=64),
  udp(sp=dinc(10000, 10999), dp=9000),
  drnd(64)
}
CFG
# send RATE: one run's sender; prints the packets per second it reached.
send() {
  if [ "$1" != trafgen ]; then
    local args
    if [ "$1" = topspeed ]; then args=(--topspeed); else args=(--pps "$1"); fi
    tcpreplay -i $a "${args[@]}" --loop $loops --duration "$secs" testdata/trace.pcap 2>&1 |
      awk '/Rated:/ {for (i=1;i<=NF;i++) if ($i ~ /pps/) print $(i-1)}' | head -1
    return
  fi
  local t0 t1 n
  t0=$(date +%s%N)
  n=$(timeout $((secs + 10)) trafgen --dev $a --conf "$dir/udp.cfg" --num $((secs * 1000000)) --cpus 1 2>&1 | tr -d '\r' |
    awk '/packets outgoing/ {print $1}')
  t1=$(date +%s%N)
  awk -v n="${n:-0}" -v ns=$((t1 - t0)) 'BEGIN {printf "%.0f", n / (ns / 1e9)}'
}
metric() { curl -s "http://127.0.0.1:$2/metrics" | awk -v m="$1" '$1==m {print $2}'; }
# cpu PID: user + system seconds of a live process.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14+$15)/hz}' "/proc/$1/stat"; }
printf "%-8s %-12s %14s %14s %12s %10s %14s\n" workers rate "sent pkt/s" "offered pkts" "ring drops" "probe s" "Mpkt/CPU-s"
for workers in 1 2; do
  port=$((7790 + workers))
  "$dir/probe" -id bench-probe -collector "$grpc" -insecure -interface $b -workers $workers -metrics-listen 127.0.0.1:$port -log-level warn &
  probe=$!
  sleep 1.5
  for rate in 100000 200000 400000 topspeed trafgen; do
    p0=$(metric owl_probe_ring_packets_total $port); d0=$(metric owl_probe_ring_drops_total $port); c0=$(cpu $probe)
    sent=$(send $rate || true)
    sleep 1
    p1=$(metric owl_probe_ring_packets_total $port); d1=$(metric owl_probe_ring_drops_total $port); c1=$(cpu $probe)
    awk -v w=$workers -v r=$rate -v s="${sent:-?}" -v p0="$p0" -v p1="$p1" -v d0="$d0" -v d1="$d1" -v c0="$c0" -v c1="$c1" \
      'BEGIN {c = c1 - c0; printf "%-8s %-12s %14s %14.0f %12.0f %10.2f %14.2f\n", w, r, s, p1-p0, d1-d0, c, (c > 0 ? (p1-p0)/c/1e6 : 0)}'
  done
  kill $probe; wait $probe 2>/dev/null || true
done
