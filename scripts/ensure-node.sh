#!/usr/bin/env bash
# Makes sure a Node.js of NODE_MAJOR or later is at hand and prints the directory of its `node`
# binary on stdout (the Makefile puts it first on PATH); says what it did on stderr.
#
# The system's node is used when it is new enough. Otherwise Node is installed from the npm
# registry into the project's .tools folder: the package node-linux-<arch>@NODE_MAJOR carries the
# official binary and its headers (include/node), so that native addons (better-sqlite3) build
# against it with npm_config_nodedir pointing there, without downloading anything else. The npm
# registry is the one source `make` already depends on (npm ci), so nothing new has to be reachable.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
NODE_MAJOR=24
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS="$ROOT/.tools/node$NODE_MAJOR"

# From `node -v` (v24.21.0), not a script: NODE_OPTIONS may make node print more.
major_of() { local v; v="$("$1" -v 2>/dev/null)" || v=v0; v="${v#v}"; v="${v%%.*}"; [[ "$v" =~ ^[0-9]+$ ]] && echo "$v" || echo 0; }

if command -v node >/dev/null && [ "$(major_of node)" -ge "$NODE_MAJOR" ]; then
  # The binary itself, not a version manager's shim that may pick another node by directory.
  dirname "$(node -e 'process.stdout.write(require("node:fs").realpathSync(process.execPath))' 2>/dev/null || command -v node)"
  exit 0
fi

case "$(uname -m)" in
  x86_64) ARCH=x64 ;;
  aarch64) ARCH=arm64 ;;
  *) say "no Node $NODE_MAJOR package for $(uname -m): install Node $NODE_MAJOR or later yourself"; exit 1 ;;
esac
PKG="node-linux-$ARCH"
BIN="$TOOLS/node_modules/$PKG/bin"
if [ -x "$BIN/node" ] && [ "$(major_of "$BIN/node")" -ge "$NODE_MAJOR" ]; then
  dirname "$BIN/node"
  exit 0
fi
command -v npm >/dev/null || { say "Node $NODE_MAJOR is needed and npm is missing to fetch it: install Debian's npm (apt-get install -y npm) or Node $NODE_MAJOR"; exit 1; }
say "the system's node is $(node -v 2>/dev/null || echo missing), svc needs Node $NODE_MAJOR: installing $PKG@$NODE_MAJOR from the npm registry into $TOOLS"
# A half-finished earlier install must not be taken for a complete one.
rm -rf "$TOOLS"
mkdir -p "$TOOLS"
# Its own folder and package file: the project's workspace and lock file are not touched.
[ -f "$TOOLS/package.json" ] || echo '{ "name": "svc-tools-node", "private": true }' > "$TOOLS/package.json"
npm install --prefix "$TOOLS" --no-save --no-package-lock --no-fund --no-audit --loglevel=error "$PKG@$NODE_MAJOR" >&2
"$BIN/node" -v >/dev/null || { say "the installed node does not run ($BIN): remove $TOOLS and run make again"; exit 1; }
say "Node $("$BIN/node" -v) is in $BIN"
dirname "$BIN/node"
