#!/usr/bin/env bash
# Installs the Redisson-compatible peer of tests/test_redisson_node.c:
# node-redisson with ioredis, exactly as pinned in tests/node/package.json
# and package-lock.json, into DEST/node_modules (DEST: the build tree's
# redisson-node directory, given by ctest). Node.js and npm come from
# Debian (nodejs, npm) when missing, with apt-get as root or through sudo.
# Run by ctest as the setup of the interoperability tests, which need its
# success: it exits non-zero, saying why, when the peer cannot be had, and
# those tests then fail rather than pass without a peer.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dest=${1:?usage: setup.sh DEST}

fail() {
  echo "redisson-node setup: $*" >&2
  exit 1
}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  run=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null && sudo -n true 2>/dev/null ||
      fail "node and npm are missing; install the Debian packages nodejs and npm"
    run=(sudo -n)
  fi
  echo "redisson-node setup: installing nodejs npm (apt-get)" >&2
  "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends nodejs npm >&2 || {
    "${run[@]}" apt-get update -q >&2 || true
    "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends nodejs npm >&2 ||
      fail "apt-get install nodejs npm failed"
  }
fi

# npm ci installs exactly the lock file (without the TypeScript compiler
# node-redisson names as a peer: its published code is JavaScript), and
# runs again only when the lock file changed since the last install.
mkdir -p "$dest"
cp "$here/package.json" "$here/package-lock.json" "$dest/"
stamp=$dest/node_modules/.installed-from
want=$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ] ||
  [ ! -d "$dest/node_modules/node-redisson" ] || [ ! -d "$dest/node_modules/ioredis" ]; then
  echo "redisson-node setup: npm ci (node-redisson, ioredis) in $dest" >&2
  (cd "$dest" && npm ci --omit=peer --no-audit --no-fund --loglevel=error >&2) ||
    fail "npm ci failed (is the npm registry reachable?)"
  echo "$want" >"$stamp"
fi
NODE_PATH=$dest/node_modules node -e 'require("node-redisson"); require("ioredis")' ||
  fail "node cannot load node-redisson and ioredis from $dest/node_modules"
echo "redisson-node setup: node-redisson $(NODE_PATH=$dest/node_modules node -p 'require("node-redisson/package.json").version') ready in $dest"
