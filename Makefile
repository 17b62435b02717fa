# cellguard — every target a newcomer or CI needs. `make check` is what CI
# should hold a change to; `make test` is what .ci/run runs.
GO ?= go
PKGS := ./...

.PHONY: demo test test-long check fmt vet race tidy-check proto proto-check bench build fuzz

build:
	$(GO) build -o bin/cellguard ./cmd/cellguard

## demo: run the whole pipeline on an embedded NATS server.
demo:
	$(GO) run ./cmd/cellguard demo

## test: the full test suite (embedded servers, hermetic).
test:
	$(GO) test -count=1 -timeout 20m $(PKGS)

## test-long: the long oracle run, more crash-injection runs, the long demo scenario.
test-long:
	$(GO) test -count=1 -timeout 60m ./evaluator -run Oracle -oracle.cases=100000
	$(GO) test -count=1 -timeout 60m ./committer -run Crash -crash.runs=500
	$(GO) test -count=1 -timeout 60m ./cmd/cellguard -run TestDemoScenario -demo.long

## check: formatting, vet, race-enabled tests, module tidiness, generated code drift.
check: fmt vet tidy-check proto-check race

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

race:
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

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
	$(GO) test -run '^$$' -bench . -benchmem ./evaluator ./table

fuzz:
	$(GO) test ./table -run '^$$' -fuzz FuzzReadManifestFile -fuzztime 60s
	$(GO) test ./table -run '^$$' -fuzz FuzzDecodeTransaction -fuzztime 60s
	$(GO) test ./table -run '^$$' -fuzz FuzzDecodeRowAddrTreeMap -fuzztime 60s
