# svc: the two commands are `make run` (svcd in dev mode on the embedded SQLite store) and
# `make test` (everything, against a real Docker Engine and a real PostgreSQL).
SHELL := /bin/bash
.DEFAULT_GOAL := build

DATA_DIR ?= .svc-data
LISTEN ?= 127.0.0.1:8080
PROXY_LISTEN ?= 127.0.0.1:8081
# Node 20's --test does not expand globs: list the files here.
TEST_FILES := $(shell find packages -path '*/node_modules' -prune -o -path '*/test/*.test.ts' -print | sort)
# One file at a time: the engine tests (gVisor containers, Caddy, a registry) overload two cores
# when two files run them at once, and first requests to fresh containers then get resets.
TEST_CONCURRENCY ?= 1

.PHONY: build deps run test bench-api bench-deploy bench-proxy bench-build bench-db bench-env clean

# npm ci only when the lock file changed since the last install (it wipes node_modules).
node_modules/.installed: package-lock.json package.json
	@echo "make: installing npm dependencies (npm ci)"
	npm ci --no-fund --no-audit
	@touch $@

deps: node_modules/.installed

build: deps
	@echo "make: compiling TypeScript"
	npx tsc -b packages/kanban packages/svcd packages/cli
	@mkdir -p bin
	@printf '#!/bin/sh\nexec node "$$(dirname "$$0")/../packages/svcd/dist/main.js" "$$@"\n' > bin/svcd
	@printf '#!/bin/sh\nexec node "$$(dirname "$$0")/../packages/cli/dist/main.js" "$$@"\n' > bin/svc
	@chmod +x bin/svcd bin/svc
	@echo "make: wrote bin/svcd and bin/svc"

run: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-caddy.sh
	@echo "make: starting svcd in dev mode with open registration on SQLite in $(DATA_DIR): API http://$(LISTEN), services behind Caddy on http://$(PROXY_LISTEN)"
	exec bin/svcd --dev --open-registration --data-dir $(DATA_DIR) --listen $(LISTEN) --proxy-listen $(PROXY_LISTEN)

test: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-test-tools.sh
	@bash scripts/ensure-caddy.sh
	@eval "$$(bash scripts/ensure-postgres.sh)" && \
	  echo "make: running $(words $(TEST_FILES)) test files on SQLite and PostgreSQL ($$SVC_TEST_PG_URL)" && \
	  SVC_BIN_DIR=$(CURDIR)/bin node --import tsx --test --test-concurrency=$(TEST_CONCURRENCY) --test-timeout=300000 --test-reporter=spec $(TEST_FILES)

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

bench-build: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-test-tools.sh
	node --import tsx bench/build/run.ts

bench-db: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-test-tools.sh
	node --import tsx bench/db/run.ts

bench-env: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-test-tools.sh
	node --import tsx bench/env/run.ts

# 10 minutes a phase by default (SOAK_MINUTES=4 make bench-soak for a shorter run); see bench/soak/run.ts.
.PHONY: bench-soak
bench-soak: build
	@bash scripts/ensure-docker.sh
	@bash scripts/ensure-test-tools.sh
	node --import tsx bench/soak/run.ts

clean:
	rm -rf bin packages/*/dist packages/*/tsconfig.tsbuildinfo
