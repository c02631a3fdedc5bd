#!/usr/bin/env bash
# jemalloc for svcd: bin/svcd preloads it in place of glibc's malloc (the Makefile's build target
# says why). Installs Debian's libjemalloc2 when missing; prints the library's path on stdout,
# nothing when there is none to be had (then bin/svcd runs on glibc's malloc, and says so here).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
if command -v dpkg-query >/dev/null 2>&1; then need_pkg libjemalloc2; fi
path=$( (ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true) | awk '$1 == "libjemalloc.so.2" { print $NF; exit }')
if [ -z "$path" ] || [ ! -f "$path" ]; then
  say "no libjemalloc.so.2 on this machine: bin/svcd runs on glibc's malloc (its RSS keeps what a burst of streams allocated)"
  exit 0
fi
echo "$path"
