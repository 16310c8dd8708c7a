# lib.sh: what the benchmark scripts share; they source it from the
# repository's root.

# start_collector BIN DIR UPSTREAM DOWNSTREAM: starts the collector BIN,
# with one path ("bench", from probe UPSTREAM to probe DOWNSTREAM), its
# store in DIR/data (emptied first), on a free loopback port. Sets coll
# (its process ID) and grpc (its gRPC address).
start_collector() {
  local bin=$1 dir=$2
  rm -rf "$dir/data" "$dir/ready"
  cat > "$dir/c.yaml" <<YAML
grpc_listen: 127.0.0.1:0
insecure: true
http_listen: ""
data_dir: $dir/data
paths: [{name: bench, upstream: $3, downstream: $4}]
YAML
  "$bin" -config "$dir/c.yaml" -ready-file "$dir/ready" -log-level error &
  coll=$!
  for _ in $(seq 100); do [ -s "$dir/ready" ] && break; sleep 0.1; done
  grpc=$(sed 's/.*"grpc":"\([^"]*\)".*/\1/' "$dir/ready")
}

# load_config BIN DIR PATHS PORT: writes DIR/c.yaml, owl-load's
# configuration of PATHS paths for the collector, its store in DIR/data,
# gRPC on PORT and HTTP on PORT+1 (BIN holds owl-load).
load_config() {
  local bin=$1 dir=$2 paths=$3 port=$4
  "$bin/owl-load" -paths "$paths" -write-config "$dir/c.yaml" >/dev/null 2>&1
  sed -i "s|^data_dir: .*|data_dir: $dir/data|; s|:7700\"|:$port\"|; s|:7701\"|:$((port + 1))\"|" "$dir/c.yaml"
}

# wait_metrics PORT: waits up to 10 s for a collector's /metrics on PORT.
wait_metrics() {
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$1/metrics" && return; sleep 0.1; done
}

# cpu_ticks PID: the process's user + system CPU so far, in clock ticks.
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
