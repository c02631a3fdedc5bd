#!/usr/bin/env bash
# Makes sure a Docker Engine (Debian's docker.io) runs, with gVisor (Debian's runsc) registered
# as a runtime, and says what it did on stderr.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_pkg docker.io
need_pkg runsc
DAEMON_JSON=/etc/docker/daemon.json
# gVisor's own network stack does not start on this kernel; with --network=host it runs, and the
# container still gets its own network namespace from the engine (DECISIONS.md, Runtime).
# runsc is also the engine's default runtime: the classic builder runs a tenant's RUN steps with
# the default runtime, so builds are sandboxed like services (svcd names the runtime of every
# workload it starts, runc or runsc, so nothing else depends on the default).
# Every tenant with a workload has a bridge network of its own: the engine's default address
# pools hold about 30 networks (172.17-31.0.0/16 and 192.168.0.0/16 in /20s), so a /24 each from
# 172.18.0.0/15 (512 networks, inside the defaults' own range) lets a host serve hundreds of
# tenants (README, Resource safety). It takes effect when dockerd starts.
WANT_JSON='{ "default-runtime": "runsc", "runtimes": { "runsc": { "path": "/usr/bin/runsc", "runtimeArgs": ["--network=host"] } }, "default-address-pools": [ { "base": "172.18.0.0/15", "size": 24 } ] }'
if ! grep -q '"default-runtime": "runsc"' "$DAEMON_JSON" 2>/dev/null || ! grep -q '"default-address-pools"' "$DAEMON_JSON" 2>/dev/null; then
  say "registering runsc with the engine as its default runtime, and address pools for one network per tenant, in $DAEMON_JSON"
  $SUDO mkdir -p /etc/docker
  echo "$WANT_JSON" | $SUDO tee "$DAEMON_JSON" >/dev/null
  if [ -S /var/run/docker.sock ] && docker version >/dev/null 2>&1; then
    say "the address pools take effect at dockerd's next start (a restart stops its containers: not done here)"
    # dockerd reloads runtimes and the default runtime on SIGHUP; running containers are untouched.
    say "reloading dockerd's configuration (SIGHUP)"
    $SUDO pkill -HUP -x dockerd || true
    for _ in $(seq 1 50); do [ "$(docker info --format '{{.DefaultRuntime}}' 2>/dev/null)" = runsc ] && break; sleep 0.2; done
  fi
fi
if ! docker version >/dev/null 2>&1; then
  say "starting dockerd (log: /var/log/svc-dockerd.log)"
  $SUDO sh -c 'nohup dockerd >/var/log/svc-dockerd.log 2>&1 &'
  for _ in $(seq 1 150); do docker version >/dev/null 2>&1 && break; sleep 0.2; done
  docker version >/dev/null 2>&1 || { say "dockerd did not come up; see /var/log/svc-dockerd.log"; exit 1; }
else
  say "dockerd already running"
fi
