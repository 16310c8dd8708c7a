# owl — passive one-way latency measurement.
GO ?= go

.PHONY: all build test lint bench demo fuzz proto certs clean

all: build

build:
	$(GO) build -o bin/ ./cmd/...

# The README's test command; CI runs it through .ci/run.
test:
	scripts/test.sh

lint:
	$(GO) vet ./...
	scripts/retry.sh 300 2 $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	$$($(GO) env GOPATH)/bin/staticcheck ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...

# The README's main command: a collector and six probes on loopback replay
# tracegen's captures of the bundled trace; results vs ground truth.
demo:
	scripts/retry.sh 300 3 $(GO) mod download
	$(GO) run ./e2e/demo $(ARGS)

# Regenerate api/owl/v1 with the pinned generators.
proto:
	scripts/proto.sh

# Short fuzzing of every decoder and handler of outside bytes (FUZZTIME
# each). FUZZMINIMIZETIME bounds the minimizing of each new input found,
# which would take most of a short run.
FUZZTIME ?= 20s
FUZZMINIMIZETIME ?= 3s
FUZZ = $(GO) test -run '^$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME)
fuzz:
	$(FUZZ) -fuzz '^FuzzDecode$$' ./internal/capture/
	$(FUZZ) -fuzz '^FuzzFileSource$$' ./internal/capture/
	$(FUZZ) -fuzz '^FuzzFastDecode$$' ./internal/capture/
	$(FUZZ) -fuzz '^FuzzDecode$$' ./internal/synopsis/lda/
	$(FUZZ) -fuzz '^FuzzDecode$$' ./internal/synopsis/rda/
	$(FUZZ) -fuzz '^FuzzDecode$$' ./internal/synopsis/lds/
	$(FUZZ) -fuzz '^FuzzDecode$$' ./internal/synopsis/sample/
	$(FUZZ) -fuzz '^FuzzDecode$$' ./internal/synopsis/exact/
	$(FUZZ) -fuzz '^FuzzUnmarshal$$' ./internal/synopsis/colate/
	$(FUZZ) -fuzz '^FuzzFromProto$$' ./internal/synopsis/reorder/
	$(FUZZ) -fuzz '^FuzzReport$$' ./internal/collector/
	$(FUZZ) -fuzz '^FuzzRepairAnswers$$' ./internal/collector/
	$(FUZZ) -fuzz '^FuzzHandover$$' ./internal/collector/
	$(FUZZ) -fuzz '^FuzzDelaySketch$$' ./internal/collector/
	$(FUZZ) -fuzz '^FuzzRequest$$' ./internal/web/
	$(FUZZ) -fuzz '^FuzzDecodePair$$' ./internal/synopsis/lds/
	$(FUZZ) -fuzz '^FuzzBoundaryRecord$$' ./internal/collector/
	$(FUZZ) -fuzz '^FuzzDecodeCache$$' ./internal/probe/
	$(FUZZ) -fuzz '^FuzzPackedFlow$$' ./internal/netpath/

# Development certificates for mTLS (docs/security.md) in $(CERTS): a CA,
# the probes of the demo and of deployments/, a collector `collector`, a
# reader `ops`. Run again to add names: the CA is kept. Add the names
# probes and readers dial with CERTS_HOSTS=collector.example,10.0.0.5.
CERTS ?= certs
CERTS_HOSTS ?=
DEMO_PROBES = up-loss-0,down-loss-0,up-loss-0.1pct,down-loss-0.1pct,up-loss-1pct,down-loss-1pct,up-loss-1pct-reorder-dup,down-loss-1pct-reorder-dup
DEPLOYMENT_PROBES = tor1-mirror,tor2-mirror,edge-mirror,core-mirror
certs:
	$(GO) run ./cmd/collector certs -dir $(CERTS) -probes $(DEMO_PROBES),$(DEPLOYMENT_PROBES) -collectors collector -readers ops -hosts '$(CERTS_HOSTS)'

clean:
	rm -rf bin
