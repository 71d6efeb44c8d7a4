# egret — build, test, benchmark. `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
BIN   ?= bin/egret
PKGS  ?= ./...
# Test timeout for the whole suite; e2e tests start real Squids, clients and an API server.
TEST_TIMEOUT ?= 20m

.PHONY: help build image image-iptables test test-deps test-short vet fmt fuzz bench bench-go bench-compare bench-referee clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

build: ## build the static egret binary into bin/egret
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN) ./cmd/egret

IMAGE ?= ghcr.io/egret-io/egret:dev
image: build ## OCI image tarball bin/egret-image.tar, no Docker daemon (IMAGE=ref to tag it)
	$(GO) run ./deploy/image -binary $(BIN) -o bin/egret-image.tar -tag $(IMAGE)

image-iptables: build ## the image plus iptables-nft/legacy from Debian packages (init container): bin/egret-iptables-image.tar
	./scripts/iptables-debs.sh bin/iptables-debs
	$(GO) run ./deploy/image -binary $(BIN) -iptables-debs bin/iptables-debs -o bin/egret-iptables-image.tar -tag $(IMAGE)-iptables

test-deps: ## install everything the tests use (apt, npm, kube-apiserver/etcd cache)
	./scripts/test-deps.sh

test: test-deps vet ## install test dependencies, then run every test with -race
	EGRET_REQUIRE_ALL=1 $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

test-short: ## unit tests only (no external tools)
	$(GO) test -short -count=1 $(PKGS)

vet: ## gofmt check and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

fuzz: ## run every fuzz target for FUZZTIME (default 30s) each
	./scripts/fuzz.sh $${FUZZTIME:-30s}

bench: bench-go bench-compare ## Go benchmarks and the side-by-side comparison

bench-go: ## Go benchmarks of the hot paths
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./internal/... | tee bench-go.txt

# Flags of tools/bench for bench-compare (go run ./tools/bench -h lists them; docs/performance.md).
BENCH_FLAGS ?= -rounds 3
bench-compare: build ## egret beside Traffic Server, minproxy, Squid, Smokescreen, tinyproxy (installs them; tools/bench): table, bench.json
	@smokescreen=$$(./scripts/bench-deps.sh) && \
	cmd="$(GO) run ./tools/bench -egret $(BIN) -smokescreen $$smokescreen -json bench.json $(BENCH_FLAGS)" && \
	echo "$$cmd" && eval "$$cmd"

bench-referee: build ## the outside referee ../shared/bench/compare.sh on plain and gateway egret, when it exists
	./scripts/bench-compare.sh

clean:
	rm -rf bin bench-go.txt bench.json
