#!/usr/bin/env bash
# proto.sh regenerates api/owl/v1 with pinned generators.
set -euo pipefail
cd "$(dirname "$0")/.."
PROTOC_GEN_GO=v1.36.12
PROTOC_GEN_GO_GRPC=v1.6.2
bin=$(go env GOPATH)/bin
if ! "$bin/protoc-gen-go" --version 2>/dev/null | grep -q "${PROTOC_GEN_GO}"; then
  scripts/retry.sh 300 2 go install google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO}
fi
if ! "$bin/protoc-gen-go-grpc" --version 2>/dev/null | grep -q "${PROTOC_GEN_GO_GRPC#v}"; then
  scripts/retry.sh 300 2 go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC}
fi
command -v protoc >/dev/null || { echo "proto.sh: protoc missing (apt-get install protobuf-compiler libprotobuf-dev)" >&2; exit 1; }
PATH="$bin:$PATH" protoc -I api -I /usr/include \
  --go_out=api --go_opt=paths=source_relative \
  --go-grpc_out=api --go-grpc_opt=paths=source_relative \
  api/owl/v1/owl.proto
