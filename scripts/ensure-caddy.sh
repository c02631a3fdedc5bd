#!/usr/bin/env bash
# Debian's caddy: svcd runs it as the public reverse proxy (--proxy-listen). svcd starts its own
# Caddy process; the package's systemd unit is not needed (and does not run without systemd).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_pkg caddy
