GO ?= go
PKGS := ./...

.PHONY: all build test test-long lint fmt vet bench proto docker fuzz

all: lint test build

build:
	CGO_ENABLED=0 $(GO) build -o bin/correctables ./cmd/correctables

# The README's test command.
test:
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

# Longer robustness runs (5,000 simulation seeds, 500 of the membership mix,
# the mutation test over 60 seeds, and whatever else CORRECTABLES_LONG=1
# enables); not part of CI.
# Hours on two cores.
test-long:
	CORRECTABLES_LONG=1 CORRECTABLES_SIM_SEEDS=5000 CORRECTABLES_SIM_MEMBER_SEEDS=500 $(GO) test -race -count=1 -timeout 6h $(PKGS)

lint: fmt vet

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# Regenerates api/*.pb.go: protoc from Debian's protobuf-compiler, the Go
# plugins pinned in go.mod's tool block.
proto:
	PATH="$$(mktemp -d):$$PATH"; d=$${PATH%%:*}; \
	$(GO) build -o $$d/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go && \
	$(GO) build -o $$d/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc && \
	protoc -I api --go_out=api --go_opt=paths=source_relative \
		--go-grpc_out=api --go-grpc_opt=paths=source_relative api/correctables.proto api/correctables_membership.proto

# The FROM-scratch image (deploy/compose.yaml runs three of them).
docker: build
	docker build -t correctables .

# Fuzz the decoders of what arrives from the network.
fuzz:
	$(GO) test ./internal/server -run '^$$' -fuzz FuzzDecodeRequest -fuzztime 300000x
	$(GO) test ./internal/replica -run '^$$' -fuzz FuzzDecodeMessage -fuzztime 500000x
