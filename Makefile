# aileron-proxy developer targets. `make demo` runs the live demo; `make test`
# runs everything CI runs (after .ci/setup has installed the test tools).
GO       ?= go
BIN      ?= bin/aileron-proxy
FUZZTIME ?= 30000x
BENCHFLAGS ?=

.PHONY: build demo test check unit fuzz bench bench-peers clean

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/aileron-proxy

demo: build
	./scripts/demo.sh

# test is the README's test command: formatting, vet, the race-enabled suite
# (unit + integration) and a short run of every fuzzer.
test: check unit fuzz

check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 30m ./...

fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

# bench runs the benchmark harness (docs/bench.md); bench-peers installs
# mitmproxy and squid so bench can compare with them.
bench: build
	$(GO) run ./bench -bin $(BIN) $(BENCHFLAGS)

bench-peers:
	./bench/peers.sh

clean:
	rm -rf bin
