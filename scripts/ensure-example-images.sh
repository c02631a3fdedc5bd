#!/usr/bin/env bash
# The examples' base images (examples/base-images.ts), for `svc deploy examples/...` on a machine
# that reaches no registry: Debian's static busybox, and the Node 24 that make brought, FROM
# scratch, in a registry on 127.0.0.1:5055 (Debian's docker-registry). Made once, then kept.
#   busybox-static: the shell and httpd of both base images
#   docker-registry: the loopback registry svc's builds pull them from
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_pkg busybox-static
need_pkg docker-registry
node --import tsx "$(dirname "$0")/../examples/base-images.ts"
