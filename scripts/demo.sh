#!/usr/bin/env bash
# The main job. Until the local cluster lands, this runs what exists.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
node bin/kube32-cli.js --help
