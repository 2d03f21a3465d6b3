/** `kube32.io/interp-mops` (seed, "Policies"). */

/** Path of the built kernel module. */
export function interpKernelPath(): string {
  return new URL('../../build/interp-mops.wasm', import.meta.url).pathname;
}

/** Millions of WebAssembly operations per second on the fixed kernel. */
export async function measureInterpMops(): Promise<number> {
  throw new Error('not implemented');
}
