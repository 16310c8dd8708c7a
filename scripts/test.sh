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
echo "== generated code is current"
if ! command -v protoc >/dev/null; then
  echo "SKIPPED: protoc is not installed (deps.sh installs it when run as root)"
elif ! scripts/proto.sh; then
  echo "make proto failed"; exit 1
elif git rev-parse --git-dir >/dev/null 2>&1 && ! git diff --exit-code -- api/; then
  echo "api/: regenerating left a diff; run make proto and commit"; exit 1
fi
# gotest runs go test and keeps its output; when it fails, the end of
# each failed test's output is printed again last, where a log cut in the
# middle still shows it (long tests print their tables first and their
# failures last).
gotest() {
  local out rc=0
  out=$(mktemp)
  go test "$@" 2>&1 | tee "$out" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "== the end of each failed test's output, again"
    awk '/^ *--- FAIL/ { flush(); name = $0; n = 0; next }
         name != "" && /^    / { buf[n++ % 30] = $0; next }
         { flush() }
         function flush(  i) {
           if (name == "") return
           print name
           for (i = (n > 30 ? n - 30 : 0); i < n; i++) print buf[i % 30]
           name = ""
         }
         END { flush() }' "$out"
  fi
  rm -f "$out"
  return "$rc"
}
echo "== go test"
gotest -count=1 -timeout 15m ./...
echo "== race detector (concurrent packages; end-to-end with race-built binaries)"
gotest -race -count=1 -timeout 10m ./internal/collector ./internal/probe ./internal/epoch ./internal/store ./internal/cluster
OWL_E2E_RACE=1 gotest -count=1 -timeout 10m ./e2e/
