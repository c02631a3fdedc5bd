#!/usr/bin/env bash
# Go, to build svc-init (packages/svc-init): Debian's golang-go, the standard library only (no
# module is fetched), built static so that it runs inside any image.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
need_pkg golang-go
