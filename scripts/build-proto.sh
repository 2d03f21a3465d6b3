#!/usr/bin/env bash
# Generates TypeScript from proto/ (FeOS's gRPC API) with buf and protoc-gen-es. Filled in by the FeOS work.
set -euo pipefail
cd "$(dirname "$0")/.."
exit 0
