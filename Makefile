# SPDX-License-Identifier: Apache-2.0
# edgeplane: `make demo` runs the SD-WAN lab demo, `make test` runs
# every test. Both install what they need first (make deps).

SHELL     := /bin/bash
# GO is a go command at least as new as go.mod's (/usr/local/go, the one
# on PATH, or the one make deps installs in /opt/edgeplane-go), looked up
# each time it is used, so the recipes after deps find what deps put there.
GO        ?= $(or $(shell scripts/go-toolchain.sh which),go)
GOFMT      = $(shell $(GO) env GOROOT)/bin/gofmt
BIN       := bin/edgeplane
DEVBIN    := bin/edgeplane-dev
GOFLAGS   ?= -buildvcs=false
FUZZTIME  ?= 30s
TESTLOG   ?= /tmp/edgeplane-test.log
DEB_PKGS  := clang llvm libbpf-dev bpftool linux-libc-dev iproute2 ethtool \
             iperf3 tshark iputils-ping util-linux procps python3 python3-venv curl stress-ng qemu-system-x86 \
             protobuf-compiler
# schemathesis (the REST API e2e test) in a venv of Debian's python3, with
# everything it pulls in pinned, so the test's results do not move when
# PyPI does.
ST_VENV   := /opt/edgeplane-venv
ST_VER    := 4.32.5
ST_PKGS   := schemathesis==$(ST_VER) anyio==4.16.0 certifi==2026.10.18 \
             charset-normalizer==3.5.2 click==8.5.1 graphql-core==3.3.2 harfile==0.6.0 \
             hypothesis==6.170.15 hypothesis-graphql==0.13.5 idna==3.20 iniconfig==2.3.1 \
             jsonschema_rs==0.60.3 markdown-it-py==4.3.0 MarkupSafe==3.0.4 mdurl==0.1.2 \
             packaging==26.3 pluggy==1.7.0 Pygments==2.21.0 pyrate-limiter==4.5.1 \
             pytest==9.2.0 PyYAML==6.0.3 requests==2.34.2 rich==15.0.0 \
             sortedcontainers==2.4.0 typing_extensions==4.16.0 urllib3==2.8.0 Werkzeug==3.1.9
GEN_PKGS  := ./internal/bpf ./internal/bpf/icmptest ./internal/cpuwatch ./internal/bench/packet ./internal/bench/endtoend ./internal/sched ./internal/sched/scx ./api/edgeplane/v1 ./internal/api
GENERATED := '*_bpfel.go' '*_bpfel_test.go' '*_bpfel.o' '*_bpfel_test.o' '*.pb.go' '*.pb.gw.go' '*.swagger.json' docs/config-reference.md internal/api/kinds_gen.go
PROTOC_PLUGINS := google.golang.org/protobuf/cmd/protoc-gen-go \
             google.golang.org/grpc/cmd/protoc-gen-go-grpc \
             github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway \
             github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2

.PHONY: all deps scx-kernel bpffs generate check-generate build test test-go fuzz bench demo fleet lint clean

all: build

## deps: install build and test dependencies from Debian (and schemathesis
## from PyPI), Go if none as new as go.mod's is here, mount bpffs.
deps:
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@scripts/go-toolchain.sh install
	@{ test -x $(ST_VENV)/bin/schemathesis && ls -d $(ST_VENV)/lib/python3*/site-packages/schemathesis-$(ST_VER).dist-info; } >/dev/null 2>&1 || { \
		echo "installing schemathesis $(ST_VER) in $(ST_VENV)"; \
		/usr/bin/python3 -m venv $(ST_VENV) && $(ST_VENV)/bin/pip install -q $(ST_PKGS); }
	@$(MAKE) --no-print-directory bpffs scx-kernel

## scx-kernel: a kernel with sched_ext (Debian trixie-backports' cloud
## kernel) for the sched_ext scheduler's test under qemu.
SCX_KERNEL ?= /var/cache/edgeplane/scx/vmlinuz
scx-kernel:
	@test -s $(SCX_KERNEL) || scripts/scx-kernel.sh $(SCX_KERNEL)

bpffs:
	@mountpoint -q /sys/fs/bpf || mount -t bpf bpffs /sys/fs/bpf

## generate: compile bpf/*.c into the Go packages (bpf2go) and the API
## protos (protoc with the plugins pinned in go.mod's tool block), and
## write the config reference (docs/config-reference.md) from the kinds'
## declarations.
generate:
	@mkdir -p bin/tools && $(GO) build -o bin/tools/ $(PROTOC_PLUGINS)
	$(GO) generate $(GEN_PKGS)
	$(GO) run ./internal/config/docgen

## check-generate: fail if the committed BPF objects, API code or config
## reference differ from their sources.
check-generate: generate
	@test -z "$$(git status --porcelain -- $(GENERATED))" || { git status --short -- $(GENERATED); echo "generated files are stale: run make generate and commit"; exit 1; }

## build: bin/edgeplane, what a gateway or a controller runs, and
## bin/edgeplane-dev, the lab, demo and bench (they run bin/edgeplane).
build: deps
	$(GO) build $(GOFLAGS) -o bin/ ./cmd/edgeplane ./cmd/edgeplane-dev

## test: every test, as root; fails if any test skipped.
test: build
	@rm -f $(TESTLOG)
	set -o pipefail; $(GO) test $(GOFLAGS) -count=1 -p 1 -timeout 30m -v ./... 2>&1 | tee $(TESTLOG) | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)' | grep -v '^=== RUN' \
		|| { awk -f .ci/failures.awk $(TESTLOG); exit 1; }
	$(MAKE) --no-print-directory fuzz
	@skips=$$(grep -c -- '--- SKIP' $(TESTLOG) || true); \
	if [ "$$skips" != "0" ]; then echo "FAIL: $$skips test(s) skipped:"; grep -A2 -- '--- SKIP' $(TESTLOG); exit 1; fi
	@echo "$$(grep -c -- '--- PASS' $(TESTLOG)) passed, $$(grep -c -- '--- FAIL' $(TESTLOG)) failed"

## fuzz: arbitrary bytes through the XDP program; nothing malformed may be redirected.
fuzz: build
	$(GO) test $(GOFLAGS) -run '^$$' -fuzz FuzzNoMalformedRedirect -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./internal/bpf/

## bench: ns/packet beside the XDP_PASS floor, one JSON object.
bench: build
	$(DEVBIN) bench --json

## demo: the SD-WAN lab demo (ping, TCP, UDP over two GRE paths through XDP gateways).
demo: build
	$(DEVBIN) demo

## fleet: the lab run as a fleet (etcd, a controller, both gateways joined), until interrupted.
fleet: build
	$(DEVBIN) lab fleet

lint:
	@test -z "$$($(GOFMT) -l $$(git ls-files '*.go'))" || { $(GOFMT) -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

clean:
	rm -rf bin
