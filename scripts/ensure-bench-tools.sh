#!/usr/bin/env bash
# Debian packages the benchmarks use:
#   wrk: the HTTP load generator of bench/proxy
#   nginx: the reverse proxy bench/proxy compares svc's routing with (run on its own config;
#          the package's own service is not needed)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_pkg wrk
need_pkg nginx
