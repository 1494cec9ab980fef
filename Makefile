GO ?= go
PKGS := ./...

.PHONY: all build test test-short test-long lint fmt vet bench

all: lint test build

build:
	CGO_ENABLED=0 $(GO) build -o bin/correctables ./cmd/correctables

# The README's test command.
test:
	$(GO) test -race -count=1 $(PKGS)

# Longer robustness runs (more simulation seeds); not part of CI.
test-long:
	CORRECTABLES_SIM_SEEDS=5000 $(GO) test -race -count=1 -timeout 60m $(PKGS)

lint: fmt vet

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)
