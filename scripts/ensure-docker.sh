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
# pools hold about 30 networks (172.17-31.0.0/16, then 192.168.0.0/16 in /20s), so the engine gets
# /24s of 172.24.0.0/13 (2,048 networks; README, Resource safety). A pool replaces the defaults,
# and the engine skips a /16 an older network holds: the defaults hand out 172.17, 172.18, ... in
# order, so a used host's networks sit at the low end, and this range keeps most of its room.
# It takes effect when dockerd starts. Settings of the operator's own in daemon.json are kept.
if ! grep -q '"default-runtime": "runsc"' "$DAEMON_JSON" 2>/dev/null || ! grep -q '"default-address-pools"' "$DAEMON_JSON" 2>/dev/null; then
  say "registering runsc with the engine as its default runtime, and address pools for one network per tenant, in $DAEMON_JSON (other settings kept)"
  $SUDO mkdir -p /etc/docker
  # python3 merges the JSON (a shell cannot): the file may hold settings of the operator's own.
  merged=$($SUDO python3 - "$DAEMON_JSON" <<'PY'
import json, os, sys
path = sys.argv[1]
conf = {}
if os.path.exists(path) and os.path.getsize(path) > 0:
    with open(path) as f:
        conf = json.load(f)
conf["default-runtime"] = "runsc"
conf.setdefault("runtimes", {})["runsc"] = {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=host"]}
conf.setdefault("default-address-pools", [{"base": "172.24.0.0/13", "size": 24}])
print(json.dumps(conf, indent=2))
PY
)
  echo "$merged" | $SUDO tee "$DAEMON_JSON" >/dev/null
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
