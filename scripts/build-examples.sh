#!/usr/bin/env bash
# Builds the example pods and the interp-mops kernel from source into build/ with the real
# compilers: asc (AssemblyScript, from npm), clang and wasm-ld (Debian's clang and lld), wat2wasm
# (Debian's wabt). Called by `npm run build`; scripts/setup.sh installs the tools.
#   build/examples/echo.wasm, build/examples/counter.wasm, build/examples/burner.wasm, build/examples/counter-c.wasm
#   build/interp-mops.wasm
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/examples
mkdir -p "$out"

need() {
  command -v "$1" >/dev/null 2>&1 || { echo "build-examples: $1 not found ($2); run scripts/setup.sh" >&2; exit 1; }
}
need clang "Debian package clang"
need wasm-ld "Debian package lld"
need wat2wasm "Debian package wabt"
[ -x node_modules/.bin/asc ] || { echo "build-examples: node_modules/.bin/asc not found; run npm ci" >&2; exit 1; }

# Each output is written beside its target and renamed over it, so that a reader (or a second
# build running at the same time, as parallel test files may start) never sees half a module.
tmp() { echo "$(dirname "$1")/.$(basename "$1").$$.tmp"; }
trap 'rm -f "$out"/.*.$$.tmp build/.*.$$.tmp' EXIT

# AssemblyScript pods: the SDK's abort hook replaces the env.abort import.
asc_flags=(-O3 --noAssert --runtime incremental --use abort=sdk/assemblyscript/index/k32_abort)
for ex in echo counter burner; do
  t=$(tmp "$out/$ex.wasm")
  node_modules/.bin/asc "examples/$ex/$ex.ts" -o "$t" "${asc_flags[@]}"
  mv -f "$t" "$out/$ex.wasm"
done

# C pods: no libc; bulk memory so that copies are memory.copy, not calls to memcpy.
t=$(tmp "$out/counter-c.wasm")
clang --target=wasm32 -O2 -mbulk-memory -nostdlib -Wl,--no-entry -Isdk/c -o "$t" examples/counter-c/counter.c
mv -f "$t" "$out/counter-c.wasm"

# The fixed kernel of kube32.io/interp-mops.
t=$(tmp build/interp-mops.wasm)
wat2wasm src/wasm/kernel/interp-mops.wat -o "$t"
mv -f "$t" build/interp-mops.wasm

echo "build-examples: $(ls "$out" | tr '\n' ' ')and interp-mops.wasm in build/"
