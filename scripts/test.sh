#!/usr/bin/env bash
# The test command: installs what it needs (scripts/setup.sh), then runs the suites.
#   bash scripts/test.sh          lint, and every suite that needs no root and no VM
#   bash scripts/test.sh --all    also the root suites: network namespaces, QEMU microVMs (CI runs this)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
hash -r
npm run lint
npm test
if [ "${1:-}" = --all ]; then
  npm run test:root
fi
