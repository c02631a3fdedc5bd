#!/usr/bin/env bash
# jemalloc for svcd: bin/svcd preloads it in place of glibc's malloc (the Makefile's build target
# says why). Installs Debian's libjemalloc2 when missing; prints the library's soname on stdout
# (the dynamic loader finds the copy of this machine's architecture), nothing when there is none
# to be had (then bin/svcd runs on glibc's malloc, and says so here).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
if command -v dpkg-query >/dev/null 2>&1; then
  need_pkg libjemalloc2
  # The package of this machine's architecture, as need_pkg installs it.
  dpkg-query -L libjemalloc2 2>/dev/null | grep -q '/libjemalloc\.so\.2$' && found=1 || found=0
else
  (ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true) | grep -q '^\s*libjemalloc\.so\.2 ' && found=1 || found=0
fi
if [ "$found" -ne 1 ]; then
  say "no libjemalloc.so.2 on this machine: bin/svcd runs on glibc's malloc (its RSS keeps what a burst of streams allocated)"
  exit 0
fi
echo libjemalloc.so.2
