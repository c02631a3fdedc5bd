#!/usr/bin/env bash
# Debian packages the benchmarks use:
#   wrk: the HTTP load generator of bench/proxy
#   nginx: the reverse proxy bench/proxy and bench/tls compare svc's routing with (run on its
#          own config; the package's own service is not needed)
#   nghttp2-client: h2load, bench/tls's HTTPS load generator (it names a host in SNI while
#          connecting to 127.0.0.1, which wrk cannot)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_pkg wrk
need_pkg nginx
need_pkg nghttp2-client
