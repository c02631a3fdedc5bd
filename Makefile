# svc: the two commands are `make run` (svcd in dev mode on the embedded SQLite store) and
# `make test` (everything, against a real Docker Engine and a real PostgreSQL).
SHELL := /bin/bash
.DEFAULT_GOAL := build

# svc runs on Node 24 LTS: the system's node when it is 24 or later, otherwise one installed from
# the npm registry into .tools (scripts/ensure-node.sh, which says what it did). Every target runs
# with it first on PATH, and bin/svcd and bin/svc exec that same binary.
NODE_BIN_DIR := $(shell bash scripts/ensure-node.sh)
ifeq ($(NODE_BIN_DIR),)
$(error no Node 24 to run svc on: see the message of scripts/ensure-node.sh above)
endif
export PATH := $(NODE_BIN_DIR):$(PATH)
# Native addons that have to compile do so against that node's headers, whatever ~/.npmrc names
# (when it has them: a system node may come without; node-gyp then fetches its own).
ifneq ($(wildcard $(NODE_BIN_DIR)/../include/node/node.h),)
export npm_config_nodedir := $(abspath $(NODE_BIN_DIR)/..)
endif
NODE_VERSION := $(shell "$(NODE_BIN_DIR)/node" -v)
# svcd's young generation held at Node 20's size. Node 24's V8 grows each semi-space to 64 MB on a
# machine with this much memory (Node 20: 16 MB), two of them, and svcd keeps that RSS between
# scavenges (bench/soak: 315 MB against 169 MB on Node 20; 220 MB with the flag). bench-api lost
# no throughput to it (README, Performance).
SVCD_NODE_FLAGS := --max-semi-space-size=16
# svcd's native memory on jemalloc instead of glibc's malloc (Debian's libjemalloc2, preloaded by
# bin/svcd). What a burst of streams allocates outside V8's heap (socket reads, engine responses)
# glibc keeps in its arenas once freed: in bench/soak svcd's RSS stepped up 30 MB with the
# misbehaving tenant and stayed there after it left (the brk heap 6 -> 22 MB, small mappings
# +20 MB). jemalloc hands freed pages back after its decay time, on a background thread also
# when svcd is idle (README, Resource safety and Soak). An operator's own LD_PRELOAD and
# MALLOC_CONF are kept; svcd takes its own entry out of LD_PRELOAD at start (SVCD_PRELOADED), so
# that the programs it starts (Caddy, iptables, git) keep their allocators.
SVCD_MALLOC_CONF := background_thread:true

DATA_DIR ?= .svc-data
LISTEN ?= 127.0.0.1:8080
PROXY_LISTEN ?= 127.0.0.1:8081

.PHONY: build deps typecheck lint run test test-domain bench-api bench-deploy bench-proxy bench-tls bench-build bench-db bench-env bench-swarm clean

# npm ci only when the lock file changed since the last install (it wipes node_modules), or when
# the install was made for another Node (native addons are built for one Node ABI).
INSTALLED := node_modules/.installed-$(NODE_VERSION)
$(INSTALLED): package-lock.json package.json
	@echo "make: installing npm dependencies for Node $(NODE_VERSION) (npm ci)"
	npm ci --no-fund --no-audit
	@touch $@

deps: $(INSTALLED)

# svc-init, PID 1 of services and environments (packages/svc-init): Go's standard library, built
# static with Debian's golang-go. Go's build cache goes to .tools unless the caller set one.
export GOCACHE ?= $(CURDIR)/.tools/go-cache
SVC_INIT := packages/svc-init/dist/svc-init
$(SVC_INIT): $(wildcard packages/svc-init/*.go) packages/svc-init/go.mod
	@bash scripts/ensure-go.sh
	@echo "make: building svc-init with $$(go version | cut -d' ' -f3) (static)"
	cd packages/svc-init && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o dist/svc-init .

build: deps $(SVC_INIT)
	@echo "make: compiling TypeScript"
	npx tsc -b packages/kanban packages/svcd packages/cli
	@echo "make: building the dashboard (Vite) into packages/dashboard/dist, which svcd serves at /"
	npx --workspace packages/dashboard vite build --logLevel warn
	@mkdir -p bin
	@jemalloc=$$(bash scripts/ensure-jemalloc.sh); \
	{ printf '#!/bin/sh\n'; \
	  if [ -n "$$jemalloc" ]; then \
	    printf 'LD_PRELOAD="%s$${LD_PRELOAD:+ $$LD_PRELOAD}"\nMALLOC_CONF="$${MALLOC_CONF:-$(SVCD_MALLOC_CONF)}"\nSVCD_PRELOADED=%s\nexport LD_PRELOAD MALLOC_CONF SVCD_PRELOADED\n' "$$jemalloc" "$$jemalloc"; \
	  fi; \
	  printf 'exec "%s/node" $(SVCD_NODE_FLAGS) "$$(dirname "$$0")/../packages/svcd/dist/main.js" "$$@"\n' "$(NODE_BIN_DIR)"; \
	} > bin/svcd; \
	if [ -n "$$jemalloc" ]; then echo "make: bin/svcd runs on jemalloc ($$jemalloc)"; fi
# The CLI as one file: no module resolution and reading of some 60 files (a command started in
# about 90 ms instead of 110-130). CommonJS, not an ES module: Node gives a CommonJS module the
# built-in modules as they are, where an ES module's import of each builds a namespace of its
# exports first (16 ms of a start, node:child_process alone 9: commander imports it); 75-80 ms
# instead of 90-98, and about 67 with start.cjs's compile cache. CommonJS has no import.meta: the banner gives its one use (program.ts, the
# version from ../package.json) the file's own URL, as esbuild's --define is meant for; it starts
# with 'use strict', which esbuild would otherwise write after it, where it is no directive.
# dist/svc.cjs sits beside dist/main.js, so its '../package.json' is the same file. node:child_process
# is loaded when a process is started, not with the CLI (src/child-process-on-use.ts says why).
	@echo "make: bundling the CLI (esbuild) into packages/cli/dist/svc.cjs, which bin/svc runs (packages/cli/start.cjs)"
	@npx esbuild packages/cli/dist/main.js --bundle --platform=node --format=cjs --target=node24 --log-level=warning \
	  --define:import.meta.url=importMetaUrl --banner:js="'use strict'; const importMetaUrl = require('node:url').pathToFileURL(__filename).href;" \
	  --alias:node:child_process=./packages/cli/dist/child-process-on-use.js \
	  --outfile=packages/cli/dist/svc.cjs
	@rm -f packages/cli/dist/svc.mjs
# bin/svc: a link to packages/cli/dist/svc-bin.cjs, whose #! line names Node 24 and which requires
# start.cjs beside it: no shell started first, 2-3 ms of every command. A .cjs file, since the
# package.json over bin/ says "type": "module" and an extensionless script would load as an ES
# module (Node resolves the link, so ../start.cjs is found from dist/). A #! line takes no spaces
# and at most 127 bytes on kernels before 5.1: a Node path with either (over 120) keeps the shell
# script instead.
	@rm -f bin/svc
	@if printf '%s' "$(NODE_BIN_DIR)" | grep -q '[[:space:]]' || [ $$(printf '%s' "$(NODE_BIN_DIR)" | wc -c) -gt 120 ]; then \
	  printf '#!/bin/sh\nexec "%s/node" "$$(dirname "$$0")/../packages/cli/start.cjs" "$$@"\n' "$(NODE_BIN_DIR)" > bin/svc; \
	else \
	  printf '#!%s/node\n// bin/svc links here (Makefile).\n'"'"'use strict'"'"';\nrequire('"'"'../start.cjs'"'"');\n' "$(NODE_BIN_DIR)" > packages/cli/dist/svc-bin.cjs; \
	  chmod +x packages/cli/dist/svc-bin.cjs; \
	  ln -s ../packages/cli/dist/svc-bin.cjs bin/svc; \
	fi
	@chmod +x bin/svcd bin/svc
	@echo "make: wrote bin/svcd and bin/svc (Node $(NODE_VERSION) in $(NODE_BIN_DIR))"

# Tests and benches run through tsx, which strips types unchecked: this checks them (and the
# sources once more, as one program) so that a fake that no longer matches its interface fails.
typecheck: deps
	@echo "make: type-checking sources, tests and benches (tsconfig.tests.json), and the dashboard (DOM and JSX)"
	npx tsc -p tsconfig.tests.json
	npx tsc -p packages/dashboard

# typescript-eslint's strict type-checked rules (eslint.config.js), over sources, tests and
# benches; make test runs it after the type check.
lint: deps
	npx eslint .

run: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-caddy.sh
	@bash scripts/ensure-example-images.sh
	@echo "make: starting svcd in dev mode with open registration on SQLite in $(DATA_DIR): API http://$(LISTEN), services behind Caddy on http://$(PROXY_LISTEN)"
	exec bin/svcd --dev --open-registration --data-dir $(DATA_DIR) --listen $(LISTEN) --proxy-listen $(PROXY_LISTEN)

# The operator-image stand-ins (several minutes on a new machine, mostly apt-get and dpkg) are
# built in the background while the checks (type check, lint, svc-init's go vet and go test) run:
# the two overlap on a CI machine instead of adding up. Tests start only once both succeeded.
OPERATOR_IMAGES_LOG := .tools/operator-images.log
test: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-test-tools.sh
	@bash scripts/ensure-caddy.sh
	@bash scripts/ensure-bench-tools.sh
	@mkdir -p .tools
	@echo "make: building the operator-image stand-ins that are missing, in the background while the checks run (once per machine; several minutes on a new one; log: $(OPERATOR_IMAGES_LOG))"
	@node --import tsx packages/svcd/test/operator-images.ts > $(OPERATOR_IMAGES_LOG) 2>&1 & images=$$!; \
	  $(MAKE) --no-print-directory typecheck lint && \
	  echo "make: testing svc-init (go vet, go test; without cgo, as it is built)" && \
	  (cd packages/svc-init && go vet ./... && CGO_ENABLED=0 go test -count=1 ./...); checks=$$?; \
	  wait $$images; built=$$?; \
	  echo "make: the operator-image stand-ins:"; cat $(OPERATOR_IMAGES_LOG); \
	  if [ $$built -ne 0 ]; then echo "make: building the operator-image stand-ins failed (above)"; fi; \
	  [ $$checks -eq 0 ] && [ $$built -eq 0 ]
	@eval "$$(bash scripts/ensure-postgres.sh)" && \
	  echo "make: running $$(ls packages/*/test/*.test.ts | wc -l) test files on Node $(NODE_VERSION), on SQLite and PostgreSQL ($$SVC_TEST_PG_URL), in lanes (scripts/run-tests.ts)" && \
	  SVC_BIN_DIR=$(CURDIR)/bin node --import tsx scripts/run-tests.ts

# The in-memory domain suites (no engine; their SQLite variants, PostgreSQL's run in make test),
# in one process: the quick loop while working on the rules. Issue 20 asks for under 10 s.
DOMAIN_SUITES := workloads-controller environments-memory deploys-memory health-checks-memory driver-memory
test-domain: deps
	@echo "make: the in-memory domain suites on SQLite, in one process: $(DOMAIN_SUITES)"
	@cd packages/svcd && began=$$(date +%s%N) && \
	  env -u SVC_TEST_PG_URL node --import tsx --test --test-isolation=none --test-timeout=60000 --test-reporter=dot $(patsubst %,test/%.test.ts,$(DOMAIN_SUITES)) && \
	  echo "make: the in-memory domain suites passed in $$(( ($$(date +%s%N) - began) / 1000000 )) ms"

bench-api: build
	@eval "$$(bash scripts/ensure-postgres.sh)" && taskset -c 1 node --import tsx bench/api/run.ts

bench-deploy: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-test-tools.sh
	@bash scripts/ensure-caddy.sh
	node --import tsx bench/deploy/run.ts

bench-proxy: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-caddy.sh
	@bash scripts/ensure-bench-tools.sh
	node --import tsx bench/proxy/run.ts

bench-tls: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-caddy.sh
	@bash scripts/ensure-test-tools.sh
	@bash scripts/ensure-bench-tools.sh
	node --import tsx bench/tls/run.ts

bench-build: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-test-tools.sh
	@bash scripts/ensure-caddy.sh
	node --import tsx bench/build/run.ts

bench-db: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-test-tools.sh
	node --import tsx bench/db/run.ts

bench-env: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-test-tools.sh
	node --import tsx bench/env/run.ts

# A swarm of three engines in network namespaces (packages/svcd/test/swarm-lab.ts), made and removed by the bench.
bench-swarm: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-test-tools.sh
	@bash scripts/ensure-caddy.sh
	node --import tsx bench/swarm/run.ts

# 10 minutes a phase by default (SOAK_MINUTES=4 make bench-soak for a shorter run); see bench/soak/run.ts.
.PHONY: bench-soak
bench-soak: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-test-tools.sh
	@bash scripts/ensure-caddy.sh
	node --import tsx bench/soak/run.ts

clean:
	rm -rf bin packages/*/dist packages/*/tsconfig.tsbuildinfo
