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
