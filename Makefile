# shardhost: `make run` builds everything and starts a local three-node cluster with the
# example entities; `make test` runs every test. Both install the Debian packages they
# need first (apt-get as root, through sudo otherwise): see `toolchains`.

GO       ?= go
TINYGO   ?= tinygo
BIN      := bin
GOROOT   := $(shell $(GO) env GOROOT)

# Go-language entities build with TinyGo when it is on PATH (or TINYGO names it), and
# with Go's wasip1 port otherwise. TinyGo modules are about 40-100 KB and start in tens
# of microseconds; Go's are 2.7 MB and take milliseconds (bench/README.md).
#
# TINYGO_FLAGS (internal/testwasm.TinyGoFlags is the same; a test checks it):
#   -target=wasip1 -buildmode=c-shared  a WASI reactor: _initialize, then the exports
#   -no-debug         no DWARF: a third of the size; panics still print their message
#   -scheduler=none   no goroutine scheduler and no asyncify: a module of half the size,
#                     and every call runs on the module's own stack instead of a new 64 KiB
#                     goroutine stack (activation 17 ms -> 45 us, memory 2 MiB -> 128 KiB).
#                     An entity handles one message at a time, so it needs none; the
#                     compiler refuses a `go` statement.
# TinyGo's defaults stay for the rest: -opt=z (-opt=2 is 40% larger and no faster
# here), the precise collector (-gc=leaking would never free; conservative is no
# smaller), and the linker's 64 KiB stack.
TINYGO_FLAGS := -target=wasip1 -buildmode=c-shared -no-debug -scheduler=none
HAVE_TINYGO  := $(shell command -v $(TINYGO) >/dev/null 2>&1 && echo yes)
TINYGO_GET   := install TinyGo >= 0.34 (https://tinygo.org/getting-started/install/)

GO_EXAMPLES     := counter faulty room bank webhook subscription
# Second versions of examples, examples/wasm/NAME-v2, built to bin/wasm/v2/NAME.wasm: a
# redeploy of the type NAME (docs/state.md, "Changing the state's encoding"). In a
# directory of their own, so that `shardhost dev` (every bin/wasm/*.wasm) leaves them out.
GO_V2_EXAMPLES  := bank
GO_TEST_MODULES := abitest
GO_SDK          := guest-sdk/go/*.go guest-sdk/go/go.mod
ifeq ($(HAVE_TINYGO),yes)
GO_WASM_COMPILER := tinygo
GO_EXAMPLE_WASM  := $(GO_EXAMPLES:%=$(BIN)/wasm/%.wasm) $(GO_EXAMPLES:%=$(BIN)/wasm/go/%.wasm)
else
GO_WASM_COMPILER := go
GO_EXAMPLE_WASM  := $(GO_EXAMPLES:%=$(BIN)/wasm/%.wasm)
endif

# Rust guests build with Debian's rustc (1.63), whose std includes wasm32-unknown-unknown;
# a rustup toolchain earlier in PATH usually lacks that target, hence the full path.
RUSTC         ?= /usr/bin/rustc
RUSTDOC       ?= /usr/bin/rustdoc
RUST_EXAMPLES := echo-rust cart counter-rust bank-rust ledger
RUST_V2_EXAMPLES := bank-rust
RUST_TEST_MODULES := abitest-rust
RUST_SDK      := guest-sdk/rust/src/lib.rs
RUST_SDK_SRC  := $(wildcard guest-sdk/rust/src/*.rs)
RUST_SDK_WASM := $(BIN)/rust/wasm32/libshardhost.rlib
RUST_SDK_HOST := $(BIN)/rust/native/libshardhost.rlib
RUST_PACKAGES := rustc libstd-rust-dev-wasm32 lld-14

# Test modules (abitest and its twins) go to bin/testwasm, never to bin/wasm, which
# `shardhost dev` deploys.
TEST_WASM := $(BIN)/testwasm

SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

.PHONY: all build image examples run test soak test-go test-faults test-guest test-guest-tinygo test-rust toolchains rust-toolchain tinygo-check bench bench-peers scale scale-smoke figures fmt-check fresh-check kube-check clean FORCE

all: build examples

# The version and commit that `shardhost version` prints (and the image's tag).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
IMAGE   ?= shardhost:$(VERSION)

build: | toolchains
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/shardhost ./cmd/shardhost

# The container image, FROM scratch (deploy/Dockerfile): the static binary, the example
# modules in bin/wasm, an empty /data owned by the image's user.
image: build examples
	rm -rf $(BIN)/image && mkdir -p $(BIN)/image/data $(BIN)/image/examples
	cp $(BIN)/shardhost deploy/Dockerfile $(BIN)/image/
	cp $(BIN)/wasm/*.wasm $(BIN)/image/examples/
	docker build -t $(IMAGE) --label org.opencontainers.image.version=$(VERSION) \
		--label org.opencontainers.image.revision=$(COMMIT) $(BIN)/image
	@echo "built $(IMAGE): docker run --rm $(IMAGE) version"

examples: $(GO_EXAMPLE_WASM) $(RUST_EXAMPLES:%=$(BIN)/wasm/%.wasm) \
	$(GO_V2_EXAMPLES:%=$(BIN)/wasm/v2/%.wasm) $(RUST_V2_EXAMPLES:%=$(BIN)/wasm/v2/%.wasm)
	@rm -f $(GO_TEST_MODULES:%=$(BIN)/wasm/%.wasm) $(RUST_TEST_MODULES:%=$(BIN)/wasm/%.wasm)
ifneq ($(HAVE_TINYGO),yes)
	@echo "TinyGo not found ($(TINYGO)): the Go examples in $(BIN)/wasm are built with Go's wasip1 port (2.7 MB each, slow to start); for TinyGo builds, $(TINYGO_GET) and make again."
endif

# The compiler of the Go examples in bin/wasm: when it changes, they are built again.
$(BIN)/wasm/.go-compiler: FORCE
	@mkdir -p $(@D)
	@echo $(GO_WASM_COMPILER) | cmp -s - $@ || echo $(GO_WASM_COMPILER) > $@

# A Go guest is a WASI reactor. TinyGo: tinygo build $(TINYGO_FLAGS). Go's port:
# GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared.
define go-wasm
	@mkdir -p $(@D)
	cd examples/wasm && GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -buildmode=c-shared -o $(CURDIR)/$@ ./$*
endef
define tinygo-wasm
	@mkdir -p $(@D)
	cd examples/wasm && $(TINYGO) build $(TINYGO_FLAGS) -o $(CURDIR)/$@ ./$*
endef

.SECONDEXPANSION:
GO_EXAMPLE_SOURCES = $$(wildcard examples/wasm/$$*/*.go) examples/wasm/go.mod $(wildcard $(GO_SDK))
ifeq ($(HAVE_TINYGO),yes)
$(GO_EXAMPLES:%=$(BIN)/wasm/%.wasm): $(BIN)/wasm/%.wasm: $(GO_EXAMPLE_SOURCES) $(BIN)/wasm/.go-compiler
	$(tinygo-wasm)
$(GO_EXAMPLES:%=$(BIN)/wasm/go/%.wasm): $(BIN)/wasm/go/%.wasm: $(GO_EXAMPLE_SOURCES)
	$(go-wasm)
else
$(GO_EXAMPLES:%=$(BIN)/wasm/%.wasm): $(BIN)/wasm/%.wasm: $(GO_EXAMPLE_SOURCES) $(BIN)/wasm/.go-compiler
	$(go-wasm)
endif

# The second versions: examples/wasm/NAME-v2, by the same compiler.
GO_V2_SOURCES = $$(wildcard examples/wasm/$$*-v2/*.go) examples/wasm/go.mod $(wildcard $(GO_SDK))
$(GO_V2_EXAMPLES:%=$(BIN)/wasm/v2/%.wasm): $(BIN)/wasm/v2/%.wasm: $(GO_V2_SOURCES) $(BIN)/wasm/.go-compiler
	@mkdir -p $(@D)
ifeq ($(HAVE_TINYGO),yes)
	cd examples/wasm && $(TINYGO) build $(TINYGO_FLAGS) -o $(CURDIR)/$@ ./$*-v2
else
	cd examples/wasm && GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -buildmode=c-shared -o $(CURDIR)/$@ ./$*-v2
endif

# A Rust guest is a cdylib for wasm32-unknown-unknown with the SDK as an rlib: panic=abort
# (a panic traps), LTO, and a 64 KiB stack (the default 1 MiB makes every instance 1 MiB).
$(RUST_SDK_WASM): $(RUST_SDK_SRC) | rust-toolchain
	@mkdir -p $(@D)
	$(RUSTC) --edition 2021 --crate-type rlib --crate-name shardhost --target wasm32-unknown-unknown \
		-C opt-level=3 -C panic=abort -D warnings -o $@ $(RUST_SDK)

RUST_CDYLIB = $(RUSTC) --edition 2021 --crate-type cdylib --crate-name $(subst -,_,$*) --target wasm32-unknown-unknown \
	-C opt-level=3 -C lto=yes -C panic=abort -C strip=symbols -C link-arg=-zstack-size=65536 \
	--extern shardhost=$(RUST_SDK_WASM) -L $(dir $(RUST_SDK_WASM)) -o $@ $<

$(RUST_EXAMPLES:%=$(BIN)/wasm/%.wasm): $(BIN)/wasm/%.wasm: examples/wasm/%/lib.rs $(RUST_SDK_WASM) | rust-toolchain
	@mkdir -p $(@D)
	$(RUST_CDYLIB)

$(RUST_V2_EXAMPLES:%=$(BIN)/wasm/v2/%.wasm): $(BIN)/wasm/v2/%.wasm: examples/wasm/%-v2/lib.rs $(RUST_SDK_WASM) | rust-toolchain
	@mkdir -p $(@D)
	$(RUST_CDYLIB)

$(RUST_TEST_MODULES:%=$(TEST_WASM)/%.wasm): $(TEST_WASM)/%.wasm: examples/wasm/%/lib.rs $(RUST_SDK_WASM) | rust-toolchain
	@mkdir -p $(@D)
	$(RUST_CDYLIB)

# The Debian packages the build needs, installed when missing (apt-get as root, through
# sudo otherwise): the CA certificates, as the go command fetches modules over HTTPS, and
# Debian's Rust toolchain for wasm32 guests. TinyGo is optional (tinygo-check says how to
# get it). Elsewhere than Debian, install their equivalents and set RUSTC.
DEBIAN_PACKAGES := ca-certificates $(RUST_PACKAGES)

toolchains:
	@if command -v dpkg-query >/dev/null; then \
		missing=$$(for p in $(DEBIAN_PACKAGES); do \
			dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
		if [ -n "$$missing" ]; then \
			echo "installing Debian packages:" $$missing; \
			if [ -n "$(SUDO)" ] && ! command -v sudo >/dev/null; then \
				echo "not root and no sudo: as root, run apt-get update && apt-get install -y --no-install-recommends" $$missing; exit 1; fi; \
			$(SUDO) apt-get update -qq && \
			$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
		fi; \
	fi
	@[ -x $(RUSTC) ] && [ -d "$$($(RUSTC) --print sysroot 2>/dev/null)/lib/rustlib/wasm32-unknown-unknown" ] && command -v rust-lld >/dev/null || { \
		echo "$(RUSTC) with the wasm32-unknown-unknown std and rust-lld are needed for Rust guests: on Debian,"; \
		echo "  apt-get install -y --no-install-recommends $(RUST_PACKAGES); elsewhere set RUSTC"; exit 1; }

rust-toolchain: toolchains

# One line when TinyGo is missing: its tests skip, or fail with SHARDHOST_REQUIRE_TINYGO=1.
tinygo-check:
ifneq ($(HAVE_TINYGO),yes)
	@if [ "$$SHARDHOST_REQUIRE_TINYGO" = 1 ]; then echo "TinyGo ($(TINYGO)) not found and SHARDHOST_REQUIRE_TINYGO=1"; exit 1; fi
	@echo "TinyGo not found ($(TINYGO)): the TinyGo tests skip; $(TINYGO_GET) to run them."
endif

run: build examples
	$(BIN)/shardhost dev

test: toolchains fmt-check tinygo-check test-guest test-rust test-go test-faults scale-smoke

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd bench/peers && $(GO) vet -mod=mod .
	cd bench/scale && $(GO) vet -mod=mod .

# The guest SDK and the examples are their own modules: tested natively, vetted for
# wasip1; the SDK's tests also run compiled to wasm by Go's port and by TinyGo, under
# wazero.
test-guest: $(BIN)/wazero test-guest-tinygo
	cd guest-sdk/go && $(GO) test ./... && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	cd guest-sdk/go && PATH="$(CURDIR)/$(BIN):$$PATH" GOWASIRUNTIME=wazero GOOS=wasip1 GOARCH=wasm \
		$(GO) test -tags shardhost_nohost -exec="$(GOROOT)/lib/wasm/go_wasip1_wasm_exec" ./...
	cd examples/wasm && $(GO) test ./... && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	cd examples/wasm && $(GO) test -tags transparent ./counter ./bank && GOOS=wasip1 GOARCH=wasm $(GO) vet -tags transparent ./counter ./bank

# TinyGo's `tinygo test` runs a wasm test binary under wasmtime; here it is compiled with
# -c and run by wazero, with the repository mounted where the tests look for ../../abi.
test-guest-tinygo: $(BIN)/wazero
ifeq ($(HAVE_TINYGO),yes)
	@mkdir -p $(BIN)/tinygo
	cd guest-sdk/go && $(TINYGO) test -c -target=wasip1 -tags shardhost_nohost -o $(CURDIR)/$(BIN)/tinygo/sdk.test.wasm .
	cd guest-sdk/go && $(CURDIR)/$(BIN)/wazero run -mount=$(CURDIR):$(CURDIR) -env PWD=$(CURDIR)/guest-sdk/go \
		$(CURDIR)/$(BIN)/tinygo/sdk.test.wasm
endif

# The Rust SDK's unit tests (with the shard ID vectors) and doc examples, and the Rust
# examples' tests, run natively against the SDK's Harness; the examples must also build
# for wasm32.
test-rust: $(RUST_EXAMPLES:%=$(BIN)/wasm/%.wasm) $(RUST_V2_EXAMPLES:%=$(BIN)/wasm/v2/%.wasm) $(RUST_TEST_MODULES:%=$(TEST_WASM)/%.wasm) | rust-toolchain
	@mkdir -p $(dir $(RUST_SDK_HOST))
	$(RUSTC) --edition 2021 --crate-name shardhost --test -D warnings -o $(BIN)/rust/native/shardhost-test $(RUST_SDK)
	$(BIN)/rust/native/shardhost-test -q
	$(RUSTC) --edition 2021 --crate-type rlib --crate-name shardhost -D warnings -o $(RUST_SDK_HOST) $(RUST_SDK)
	$(RUSTDOC) --edition 2021 --test --crate-name shardhost -L $(dir $(RUST_SDK_HOST)) $(RUST_SDK)
	set -e; for ex in $(RUST_EXAMPLES) $(RUST_V2_EXAMPLES:%=%-v2) $(RUST_TEST_MODULES); do \
		$(RUSTC) --edition 2021 --crate-name $$(echo $$ex | tr - _) --test -D warnings \
			--extern shardhost=$(RUST_SDK_HOST) -L $(dir $(RUST_SDK_HOST)) \
			-o $(BIN)/rust/native/$$ex-test examples/wasm/$$ex/lib.rs; \
		$(BIN)/rust/native/$$ex-test -q; \
	done
	set -e; for ex in counter-rust bank-rust; do \
		$(RUSTC) --edition 2021 --crate-name $$(echo $$ex | tr - _) --test -D warnings --cfg transparent \
			--extern shardhost=$(RUST_SDK_HOST) -L $(dir $(RUST_SDK_HOST)) \
			-o $(BIN)/rust/native/$$ex-transparent-test examples/wasm/$$ex/lib.rs; \
		$(BIN)/rust/native/$$ex-transparent-test -q; \
	done

# The Go tests build their modules themselves (internal/testwasm), with the same TinyGo.
# The fault schedules (faults/) run apart, in test-faults.
test-go: | rust-toolchain
	TINYGO=$(TINYGO) $(GO) test -race -count=1 -timeout 60m ./...

# 200 fault schedules (faults/doc.go), seeds 1 to 200, 12 at once, without the race
# detector (which slows the members past their failure detectors' deadlines; the
# package's seed tests run under it in test-go). A failure prints the line that reruns
# its seed. About 5 minutes on 2 cores.
FAULT_SEEDS ?= 200
test-faults:
	$(GO) test ./faults -run 'TestFaultSchedules$$' -count=1 -timeout 30m -seeds=$(FAULT_SEEDS) -base=1 -parallel-runs=12 -transfers -v

# The fault schedules (faults/): SEEDS of them from seed BASE (a
# new BASE each time by default, so that soaks explore), without the race detector,
# RUNS at once over every core, with partitions that cut off up to SIDE members (the
# test's default is 1; with 2 or more, a shard that loses two of its three state
# replicas is unavailable until they return, which the harness does). A failure prints
# the line that reruns its seed.
SEEDS ?= 1000
BASE  ?= $(shell date +%s)
RUNS  ?= 12
SIDE  ?= 3
soak:
	@echo "fault schedules: seeds $(BASE) to $$(($(BASE) + $(SEEDS) - 1))"
	$(GO) test ./faults -run 'TestFaultSchedules$$' -count=1 -timeout 0 -seeds=$(SEEDS) -base=$(BASE) -parallel-runs=$(RUNS) -max-side=$(SIDE) -v

$(BIN)/wazero:
	$(GO) build -o $@ github.com/tetratelabs/wazero/cmd/wazero

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./host/ ./cluster/ ./sharding/pgstore/

# shardhost beside Proto.Actor in one process and one run: one markdown table of figures,
# ratios and floors (bench/peers/README.md). bench/peers is a module of its own, so the
# peer stays out of this one's dependencies; make test neither builds nor runs it.
# PEERS_FLAGS passes flags, e.g. PEERS_FLAGS='-dur 1s -rss-sizes 1000,10000'. -mod=mod:
# a dependency this module gained since bench/peers/go.sum was written is added to it.
PEERS_FLAGS ?=
bench-peers: examples
	cd bench/peers && $(GO) run -mod=mod . -wasm $(CURDIR)/$(BIN)/wasm $(PEERS_FLAGS)

# How costs grow with members and shards (docs/scale.md): the membership protocol on a
# simulated network and clock, the shard coordinator's decisions and its state in
# distributed data, distributed data alone, the state store's ring, routing a message
# with cold and warm home caches; CSVs and PNG plots
# into docs/scale/, a markdown summary on stdout.
# Not part of make test (hours on a busy 2-core machine, most of it 1,000 members). SIZES are
# the membership sizes, SHARDS the shard counts; sizes the machine cannot hold are
# refused before anything runs, with the estimated memory. bench/scale is a module of its
# own, so that the plotting library stays out of this one's dependencies.
SIZES  ?= 10,30,100,300,1000
SHARDS ?= 1000,10000,100000
scale:
	cd bench/scale && nice -n 10 $(GO) run -mod=mod . -sizes $(SIZES) -shards $(SHARDS) -out $(CURDIR)/docs/scale

# The same at small sizes (10 and 30 members, 1k and 5k shards, 3 real members for the
# state, 100 keys on 3 real members for distributed data, routing over 10 members), into a temporary directory: under a minute alone, about 2 minutes on a loaded
# 2-core machine. A phase that does not end fails it. make test runs it.
scale-smoke:
	out=$$(mktemp -d) && cd bench/scale && $(GO) run -mod=mod . -smoke -out $$out >/dev/null && rm -rf $$out

# bench/README.md's table of the counter built by TinyGo, by Go's port and in Rust (each
# sub-benchmark does a fixed amount of work: run once, without the race detector).
figures:
	TINYGO=$(TINYGO) $(GO) test -run '^$$' -bench 'BenchmarkCounterFigures' -benchtime 1x -timeout 30m ./host/

# The README's two commands on a fresh Debian 12 made by debootstrap, in Docker (slow:
# most of an hour; not part of make test).
fresh-check:
	.ci/fresh-check

# deploy/kubernetes applied to a single-node Kubernetes built here (tools/kube: etcd,
# containerd, runc and the CNI plugins from Debian, the Kubernetes components, kubectl,
# kustomize and CoreDNS from the Go module proxy), then rolled, scaled, drained under
# load (docs/kubernetes.md). Root and docker; the first run builds the components for
# most of an hour on 2 cores (cached in ~/.cache/shardhost/kube-VERSION). Not part of
# make test or CI.
kube-check:
	tools/kube/check.sh

clean:
	rm -rf $(BIN) .shardhost

FORCE:
