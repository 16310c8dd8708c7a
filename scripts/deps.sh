#!/usr/bin/env bash
# deps.sh installs what owl's build and tests need on a fresh Debian machine
# with Go: the Go modules, and (when run as root, for the end-to-end tests)
# the Debian packages the tests use (chromium, headless, for the web page's
# browser test).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/retry.sh 300 3 go mod download
need=()
for tool in protoc:protobuf-compiler /usr/include/google/protobuf/timestamp.proto:libprotobuf-dev tcpdump:tcpdump tshark:tshark tcpreplay:tcpreplay ip:iproute2 ethtool:ethtool chromium:chromium; do
  t=${tool%%:*}
  if [[ $t == /* ]]; then [ -e "$t" ] && continue; else command -v "$t" >/dev/null 2>&1 && continue; fi
  need+=("${tool#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    scripts/retry.sh 300 2 apt-get update -q >/dev/null || true
    scripts/retry.sh 600 2 apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "deps.sh: missing ${need[*]}; tests that need them will be skipped" >&2
  fi
fi
