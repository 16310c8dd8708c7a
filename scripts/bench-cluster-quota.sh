#!/usr/bin/env bash
# bench-cluster-quota.sh: how a cluster scales with the CPU it gets, on a
# machine with fewer cores than members. Each collector runs in a cgroup
# of its own capped at QUOTA of a CPU (the CFS bandwidth limit: 0.4 is 40
# ms of CPU in each 100 ms), so N members get N×QUOTA of a CPU between
# them, whatever the machine's core count. owl-load spawns 1, 2 and 3
# members (-spawn, through a wrapper that puts each into its cgroup) with
# PER_MEMBER paths each (weak scaling: 3 members carry 3 times the
# paths), sends EPOCHS epochs as fast as they are answered (-rate 0) and
# checks every result. It prints one row per cluster size: path-epochs
# reconciled a second, that over the one-member figure, the members' CPU
# per path-epoch (all members together), the CPU they used over what
# their caps allow, and the results found exact. owl-load itself runs
# outside the cgroups: on two cores keep 3×QUOTA + its share (about 0.3
# ms of CPU a path-epoch) under 2. MEMBERS (default "1 2 3") picks the
# cluster sizes, and EXTRA adds owl-load flags to each run, as
# MEMBERS=3 EXTRA="-kill c1@15 -kill-signal TERM" for a member stopped
# under load (the ratio is then over the first size MEMBERS names).
#   usage: scripts/bench-cluster-quota.sh BIN [QUOTA] [PER_MEMBER] [EPOCHS]
# BIN is a directory holding collector and owl-load (go build -o DIR/
# ./cmd/collector ./cmd/owl-load). Needs root and the cgroup cpu
# controller (v1 at /sys/fs/cgroup/cpu, or v2).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,22p' "$0"; exit 2; }
bin=$(cd "$1" && pwd) quota=${2:-0.4} per=${3:-300} epochs=${4:-50}
if [ -w /sys/fs/cgroup/cpu ] && [ -e /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
  root=/sys/fs/cgroup/cpu v=1
elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  root=/sys/fs/cgroup v=2
  grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
else
  echo "no writable cgroup cpu controller (needs root)" >&2
  exit 2
fi
us=$(python3 -c "print(int(round($quota * 100000)))")
[ "$us" -ge 1000 ] || { echo "QUOTA $quota: at least 0.01" >&2; exit 2; }
dir=$(mktemp -d)
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
  for g in "$root"/owl-quota-*; do [ -d "$g" ] && rmdir "$g" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

# The wrapper owl-load spawns as its collector: a cgroup of its own, the
# cap, then the collector in its place (same process, so owl-load's CPU
# and memory readings are the collector's).
cat >"$dir/collector" <<EOF
#!/bin/sh
g=$root/owl-quota-\$\$
mkdir "\$g"
if [ $v = 1 ]; then
  echo 100000 >"\$g/cpu.cfs_period_us"
  echo $us >"\$g/cpu.cfs_quota_us"
else
  echo "$us 100000" >"\$g/cpu.max"
fi
echo \$\$ >"\$g/cgroup.procs"
exec "$bin/collector" "\$@"
EOF
chmod +x "$dir/collector"

echo "| members | CPU cap | paths | path-epochs/s | over 1 member | ms per path-epoch | CPU used of cap | exact |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
base=
for n in ${MEMBERS:-1 2 3}; do
  paths=$((per * n))
  # shellcheck disable=SC2086 # EXTRA is words of flags
  "$bin/owl-load" -spawn "$n" -collector-bin "$dir/collector" -paths "$paths" -epochs "$epochs" -rate 0 \
    ${EXTRA:-} -log-level error -out json >"$dir/load-$n.json" 2>"$dir/load-$n.err" || true
  row=$(python3 - "$dir/load-$n.json" "$n" "$quota" "$paths" "${base:-0}" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError:
    print("failed"); sys.exit()
n, quota, paths, base = int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
rate = d["reconciled_per_second"]
costs = d.get("collector_costs") or []
cpu = sum(c["cpu_seconds"] for c in costs)
ms = 1000 * cpu / max(d["results"], 1)
used = cpu / (n * quota * d["seconds"]) if d["seconds"] else 0
ratio = f"{rate / base:.2f}" if base else "1"
print(f"{rate:.0f}@@| {n} | {n * quota:.1f} CPU | {paths} | {rate:.0f} | {ratio} | {ms:.2f} | {used:.0%} | {d['exact']}/{d['results']} |")
PY
)
  if [ "$row" = failed ]; then
    echo "owl-load with $n members failed:" >&2
    tail -5 "$dir/load-$n.err" >&2
    exit 1
  fi
  [ -n "$base" ] || base=${row%%@@*}
  echo "${row#*@@}"
done
