#!/usr/bin/env bash
# Debian packages the tests use to build their own images (no registry is reachable):
#   busybox-static: a static binary for FROM scratch test images (HTTP server, shell, nc)
#   docker-registry: a registry on loopback, for the loopback-registry cases
#   debootstrap: the Debian root file system of the stand-ins for the operator images (postgres,
#     redis, the board's Node base; test/operator-images.ts)
#   redis-tools: redis-cli, the real client the database tests connect with (psql comes with postgresql)
#   chromium: the browser the task-board test drives through playwright-core (never a downloaded one)
#   strace: store.test.ts watches which of svcd's threads fsync
#   pebble, openssl: tls.test.ts's ACME server (RFC 8555, made for tests) and its own certificate
#   haproxy: the operator's load balancer in front of two svcd (examples/two-svcd/haproxy.cfg)
#   (caddy comes from scripts/ensure-caddy.sh, which make test runs too)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_pkg busybox-static
need_pkg docker-registry
need_pkg debootstrap
need_pkg redis-tools
need_pkg chromium
need_pkg strace
need_pkg pebble
need_pkg openssl
need_pkg haproxy
