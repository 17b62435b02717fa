# cellguard — every target a newcomer or CI needs. `make test` is what
# .ci/run runs and what CI holds a change to: formatting, vet, module
# tidiness, generated-code drift and the race-enabled suite. `make check`
# is the same target under its older name.
GO ?= go
PKGS := ./...

.PHONY: strace-tool certs rules-test demo test test-quick test-long test-nemesis check fmt vet race tidy-check proto proto-check bench build fuzz

build:
	$(GO) build -o bin/cellguard ./cmd/cellguard

## certs: a throw-away test CA, NATS server/client certificates and nkey seeds
## (one per role) in deploy/secrets, for deploy/compose and deploy/nats.
certs:
	$(GO) run ./internal/tools/certs deploy/secrets

## demo: run the whole pipeline on an embedded NATS server.
demo:
	$(GO) run ./cmd/cellguard demo

## test: gofmt, go vet, go mod tidy -diff, proto drift, and the whole
## suite under the race detector (embedded servers, hermetic).
test: check

## test-quick: the suite without the race detector, for quick local runs.
test-quick:
	$(GO) test -count=1 -timeout 20m $(PKGS)

## test-long: the long oracle run, more crash-injection runs, the long demo scenario,
## and the soak: 8 SDK workers, SIGKILLs of a real serve, stale reads at lag ≤ 50,000.
test-long:
	$(GO) test -count=1 -timeout 60m ./evaluator -run Oracle -oracle.cases=100000
	$(GO) test -count=1 -timeout 60m ./committer -run Crash -crash.runs=500
	$(GO) test -count=1 -timeout 60m ./internal/demo -run TestDemoScenario -demo.long
	$(GO) test -count=1 -timeout 10m -v ./committer -run TestFailoverDecisionGap -failover.measure
	$(GO) test -count=1 -timeout 60m -v ./cmd/cellguard -run TestSoak -soak -soak.duration=5m -soak.lag=50000 -soak.maxgap=1s

## test-nemesis: a 3-node cluster of nats-server processes (built from the
## pinned module, sync_interval: always) behind our TCP proxies, 3 serve
## processes, SDK workers and LanceDB writers through the namespace under
## seeded faults (committer and server SIGKILL and SIGSTOP, partitions of a
## node and of the decision log's leader, all servers killed at once, a
## damaged block file), then the checkers (log, published tables,
## per-dataset linearizability); and the fsync-before-ack traces of the
## embedded server and the shipped cluster configs. `make test` runs a
## short nemesis: each kind of fault once.
test-nemesis: strace-tool
	CELLGUARD_REQUIRE_STRACE=1 $(GO) test -count=1 -timeout 20m ./cmd/cellguard ./deploy -run 'SyncsBeforeAck'
	$(GO) test -count=1 -timeout 30m -v ./cmd/cellguard -run TestNemesis -args -nemesis -nemesis.duration=5m -nemesis.seed=1
	$(GO) test -count=1 -timeout 30m -v ./cmd/cellguard -run TestNemesis -args -nemesis -nemesis.duration=2m -nemesis.seed=2

## check: formatting, vet, module tidiness, generated code drift, alert rule
## unit tests, race-enabled tests.
check: fmt vet tidy-check proto-check rules-test race

## rules-test: promtool unit tests of the alert rules, with promtool pinned in
## internal/tools/promtool (its own module, so Prometheus stays out of go.mod).
rules-test:
	cd internal/tools/promtool && $(GO) tool promtool test rules $(CURDIR)/deploy/alerts/cellguard.rules.test.yml

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# CELLGUARD_REQUIRE_STRACE: the fsync-before-ack trace check
# (cmd/cellguard TestEmbeddedSyncsBeforeAck) fails instead of skipping
# when strace is missing; strace-tool installs it with apt-get when it can.
race: strace-tool
	CELLGUARD_REQUIRE_STRACE=1 $(GO) test -race -count=1 -timeout 15m $(PKGS)

strace-tool:
	@command -v strace >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace) >/dev/null; \
		else echo "strace is needed by the sync check: install it (apt-get install strace)"; exit 1; fi; }

tidy-check:
	$(GO) mod tidy -diff

## proto: regenerate Go code from proto/ with the tools pinned in go.mod.
proto:
	$(GO) tool buf generate

## proto-check: fail when the committed generated code differs from a fresh generation.
proto-check:
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	$(GO) tool buf generate -o $$tmp && \
	for f in $$(cd $$tmp && find . -name '*.pb.go'); do \
		cmp -s $$tmp/$$f $$f || { echo "generated code drifted: $$f (run make proto)"; exit 1; }; \
	done && echo "generated code up to date"

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./evaluator ./table ./lancefile

fuzz:
	$(GO) test ./table -run '^$$' -fuzz FuzzReadManifestFile -fuzztime 60s
	$(GO) test ./table -run '^$$' -fuzz FuzzDecodeTransaction -fuzztime 60s
	$(GO) test ./table -run '^$$' -fuzz FuzzDecodeRowAddrTreeMap -fuzztime 60s
	$(GO) test ./lancefile -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime 60s -fuzzminimizetime 5s
	$(GO) test ./lancefile -run '^$$' -fuzz '^FuzzReadColumn$$' -fuzztime 60s -fuzzminimizetime 5s
