#!/usr/bin/env bash
# test.sh is what `make test` and CI run: dependencies, vet, static checks,
# generated-code check, then every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
echo "== go vet"
go vet ./...
echo "== staticcheck"
scripts/retry.sh 300 2 go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
"$(go env GOPATH)/bin/staticcheck" ./...
echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt needed: $unformatted"; exit 1; fi
echo "== go test"
go test -count=1 -timeout 15m ./...
