# egret — build, test, benchmark. `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
BIN   ?= bin/egret
PKGS  ?= ./...
# Test timeout of each package's test binary; e2e tests start real Squids, clients and an API server.
# internal/noproxy, the NO_PROXY differential against every real client, takes about 19 minutes
# under -race beside the other packages on 2 cores: the limit leaves it room without hiding a hang.
TEST_TIMEOUT ?= 35m

.PHONY: help build image image-iptables release test test-deps test-short vet fmt fuzz bench bench-go bench-compare bench-referee clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

# Build identity (internal/version, `egret version`, the image labels, the
# egret_build_info metric): git describe of the tag, the commit, whether the
# work tree has uncommitted changes, and the build date: SOURCE_DATE_EPOCH
# when set, else the commit's date, so one commit always builds the same bytes.
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT     ?= $(shell git rev-parse HEAD 2>/dev/null)
DIRTY      ?= $(shell test -z "$$(git status --porcelain --untracked-files=no 2>/dev/null)" && echo false || echo true)
BUILD_DATE ?= $(shell date -u -d "@$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null || echo 0)}" +%Y-%m-%dT%H:%M:%SZ)
VPKG       := egret.io/egret/internal/version
LDFLAGS    := -s -w -X $(VPKG).version=$(VERSION) -X $(VPKG).commit=$(COMMIT) -X $(VPKG).dirty=$(DIRTY) -X $(VPKG).date=$(BUILD_DATE)
# CGO_ENABLED=0: one static binary (a plain `go build` links libc for net and os/user).
space     := $(subst ,, )
comma     := ,
GOBUILD    := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)'

build: ## build the static egret binary into bin/egret, stamped with the version
	$(GOBUILD) -o $(BIN) ./cmd/egret

IMAGE     ?= ghcr.io/egret-io/egret:dev
PLATFORMS ?= linux/amd64 linux/arm64
EGRET_CACHE ?= $(HOME)/.cache/egret
# The Debian packages the images take files from (the pinned ca-certificates,
# base-files, iptables): scripts/image-debs.sh, once, into the cache.
DEBS       := $(EGRET_CACHE)/image-debs
DEB_ARCHES  = $(foreach p,$(PLATFORMS),$(lastword $(subst /, ,$(p))))
image: ## OCI image layout bin/egret-oci: an index for PLATFORMS, SPDX SBOMs, version labels; no Docker daemon
	./scripts/image-debs.sh $(DEBS) $(DEB_ARCHES)
	@set -e; for p in $(PLATFORMS); do \
	  echo "build $$p"; GOOS=$${p%/*} GOARCH=$${p#*/} $(GOBUILD) -o bin/$${p%/*}-$${p#*/}/egret ./cmd/egret; \
	done
	$(GO) run ./deploy/image $(foreach p,$(PLATFORMS),-binary $(p)=bin/$(subst /,-,$(p))/egret) -debs $(DEBS) \
	  -version '$(VERSION)' -revision '$(COMMIT)' -created '$(BUILD_DATE)' -sbom bin -o bin/egret-oci -tag $(IMAGE)

image-iptables: build ## the image plus iptables-nft/legacy from Debian packages (init container), this machine's platform: bin/egret-iptables-oci
	./scripts/image-debs.sh $(EGRET_CACHE)/image-debs
	$(GO) run ./deploy/image -binary linux/$$($(GO) env GOARCH)=$(BIN) -debs $(EGRET_CACHE)/image-debs -iptables-debs $(EGRET_CACHE)/image-debs \
	  -version '$(VERSION)' -revision '$(COMMIT)' -created '$(BUILD_DATE)' -sbom bin -o bin/egret-iptables-oci -tag $(IMAGE)-iptables

release: ## dist/VERSION/: both images (OCI archives, amd64+arm64), the chart pinned by digest, egret.yaml, SBOMs, checksums, signatures and SLSA provenance (COSIGN_KEY), verified; docs/release.md
	VERSION='$(VERSION)' COMMIT='$(COMMIT)' BUILD_DATE='$(BUILD_DATE)' GO='$(GO)' EGRET_CACHE='$(EGRET_CACHE)' ./scripts/release.sh

test-deps: ## install everything the tests use (apt, npm, kube-apiserver/etcd and Debian packages into EGRET_CACHE)
	./scripts/test-deps.sh

# The suite runs through tools/testsummary: plain go test output, then the
# counts and every skipped test with its reason; the exit code is go test's.
test: test-deps vet ## install test dependencies, then run every test with -race; lists skipped tests at the end
	set -o pipefail; EGRET_REQUIRE_ALL=1 $(GO) test -json -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS) | $(GO) run ./tools/testsummary

test-short: ## unit tests only (no external tools, nothing installed), a few minutes
	set -o pipefail; $(GO) test -json -short -count=1 $(PKGS) | $(GO) run ./tools/testsummary

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
	rm -rf bin dist bench-go.txt bench.json
