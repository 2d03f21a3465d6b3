#!/usr/bin/env bash
# Generates TypeScript from proto/ (FeOS's gRPC API) into src/feos/gen/ with buf and protoc-gen-es
# (both from npm; nothing is downloaded). The generated files are not committed.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! find proto -name '*.proto' | grep -q .; then exit 0; fi
npx --no-install buf generate
