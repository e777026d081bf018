# shardhost: `make run` builds everything and starts a local three-node cluster with the
# example entities; `make test` runs every test.

GO       ?= go
BIN      := bin
EXAMPLES := counter faulty
GOROOT   := $(shell $(GO) env GOROOT)

.PHONY: all build examples run test test-go test-guest bench fmt-check clean

all: build examples

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/shardhost ./cmd/host

examples: $(EXAMPLES:%=$(BIN)/wasm/%.wasm)

# A Go guest is a WASI reactor: GOOS=wasip1 GOARCH=wasm -buildmode=c-shared.
$(BIN)/wasm/%.wasm: examples/wasm/%/*.go examples/wasm/go.mod guest-sdk/go/*.go
	@mkdir -p $(BIN)/wasm
	cd examples/wasm && GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -buildmode=c-shared -o ../../$@ ./$*

run: build examples
	$(BIN)/shardhost dev

test: fmt-check test-guest test-go

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

test-go:
	$(GO) test -race -timeout 30m ./...

$(BIN)/wazero:
	$(GO) build -o $@ github.com/tetratelabs/wazero/cmd/wazero

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./host/ ./cluster/

clean:
	rm -rf $(BIN) .shardhost
