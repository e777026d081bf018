# shardhost: `make run` builds everything and starts a local three-node cluster with the
# example entities; `make test` runs every test.

GO       ?= go
BIN      := bin
EXAMPLES := counter faulty room
GOROOT   := $(shell $(GO) env GOROOT)

# Rust guests build with Debian's rustc (1.63), whose std includes wasm32-unknown-unknown;
# a rustup toolchain earlier in PATH usually lacks that target, hence the full path.
RUSTC         ?= /usr/bin/rustc
RUSTDOC       ?= /usr/bin/rustdoc
RUST_EXAMPLES := echo-rust cart
RUST_TEST_MODULES := abitest-rust
RUST_SDK      := guest-sdk/rust/src/lib.rs
RUST_SDK_SRC  := $(wildcard guest-sdk/rust/src/*.rs)
RUST_SDK_WASM := $(BIN)/rust/wasm32/libshardhost.rlib
RUST_SDK_HOST := $(BIN)/rust/native/libshardhost.rlib
RUST_PACKAGES := rustc libstd-rust-dev-wasm32 lld-14

.PHONY: all build examples run test test-go test-guest test-rust rust-toolchain bench fmt-check clean

all: build examples

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/shardhost ./cmd/host

examples: $(EXAMPLES:%=$(BIN)/wasm/%.wasm) $(RUST_EXAMPLES:%=$(BIN)/wasm/%.wasm)

# A Go guest is a WASI reactor: GOOS=wasip1 GOARCH=wasm -buildmode=c-shared.
$(BIN)/wasm/%.wasm: examples/wasm/%/*.go examples/wasm/go.mod guest-sdk/go/*.go
	@mkdir -p $(BIN)/wasm
	cd examples/wasm && GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -buildmode=c-shared -o ../../$@ ./$*

# A Rust guest is a cdylib for wasm32-unknown-unknown with the SDK as an rlib: panic=abort
# (a panic traps), LTO, and a 64 KiB stack (the default 1 MiB makes every instance 1 MiB).
$(RUST_SDK_WASM): $(RUST_SDK_SRC) | rust-toolchain
	@mkdir -p $(@D)
	$(RUSTC) --edition 2021 --crate-type rlib --crate-name shardhost --target wasm32-unknown-unknown \
		-C opt-level=3 -C panic=abort -D warnings -o $@ $(RUST_SDK)

$(RUST_EXAMPLES:%=$(BIN)/wasm/%.wasm) $(RUST_TEST_MODULES:%=$(BIN)/wasm/%.wasm): $(BIN)/wasm/%.wasm: examples/wasm/%/lib.rs $(RUST_SDK_WASM) | rust-toolchain
	@mkdir -p $(BIN)/wasm
	$(RUSTC) --edition 2021 --crate-type cdylib --crate-name $(subst -,_,$*) --target wasm32-unknown-unknown \
		-C opt-level=3 -C lto=yes -C panic=abort -C strip=symbols -C link-arg=-zstack-size=65536 \
		--extern shardhost=$(RUST_SDK_WASM) -L $(dir $(RUST_SDK_WASM)) -o $@ $<

rust-toolchain:
	@test -x $(RUSTC) || { echo "$(RUSTC) not found. Rust guests need Debian's Rust toolchain for wasm32:"; \
		echo "  apt-get update && apt-get install -y --no-install-recommends $(RUST_PACKAGES)   (.ci/run does this)"; exit 1; }
	@test -d "$$($(RUSTC) --print sysroot)/lib/rustlib/wasm32-unknown-unknown" && command -v rust-lld >/dev/null || { \
		echo "$(RUSTC) lacks the wasm32-unknown-unknown std or rust-lld. Install:"; \
		echo "  apt-get update && apt-get install -y --no-install-recommends $(RUST_PACKAGES)   (.ci/run does this)"; exit 1; }

run: build examples
	$(BIN)/shardhost dev

test: fmt-check test-guest test-rust test-go

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# The guest SDK and the examples are their own modules: tested natively, vetted for
# wasip1, and the SDK's tests also run compiled to wasip1 under wazero.
test-guest: $(BIN)/wazero
	cd guest-sdk/go && $(GO) test ./... && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	cd guest-sdk/go && PATH="$(CURDIR)/$(BIN):$$PATH" GOWASIRUNTIME=wazero GOOS=wasip1 GOARCH=wasm \
		$(GO) test -tags shardhost_nohost -exec="$(GOROOT)/lib/wasm/go_wasip1_wasm_exec" ./...
	cd examples/wasm && $(GO) test ./... && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...

# The Rust SDK's unit tests (with the shard ID vectors) and doc examples, and the Rust
# examples' tests, run natively against the SDK's Harness; the examples must also build
# for wasm32.
test-rust: $(RUST_EXAMPLES:%=$(BIN)/wasm/%.wasm) $(RUST_TEST_MODULES:%=$(BIN)/wasm/%.wasm) | rust-toolchain
	@mkdir -p $(dir $(RUST_SDK_HOST))
	$(RUSTC) --edition 2021 --crate-name shardhost --test -D warnings -o $(BIN)/rust/native/shardhost-test $(RUST_SDK)
	$(BIN)/rust/native/shardhost-test -q
	$(RUSTC) --edition 2021 --crate-type rlib --crate-name shardhost -D warnings -o $(RUST_SDK_HOST) $(RUST_SDK)
	$(RUSTDOC) --edition 2021 --test --crate-name shardhost -L $(dir $(RUST_SDK_HOST)) $(RUST_SDK)
	set -e; for ex in $(RUST_EXAMPLES) $(RUST_TEST_MODULES); do \
		$(RUSTC) --edition 2021 --crate-name $$(echo $$ex | tr - _) --test -D warnings \
			--extern shardhost=$(RUST_SDK_HOST) -L $(dir $(RUST_SDK_HOST)) \
			-o $(BIN)/rust/native/$$ex-test examples/wasm/$$ex/lib.rs; \
		$(BIN)/rust/native/$$ex-test -q; \
	done

test-go:
	$(GO) test -race -count=1 -timeout 30m ./...

$(BIN)/wazero:
	$(GO) build -o $@ github.com/tetratelabs/wazero/cmd/wazero

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./host/ ./cluster/

clean:
	rm -rf $(BIN) .shardhost
