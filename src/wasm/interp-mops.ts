/**
 * `kube32.io/interp-mops` (seed, "Policies": "Each node reports its interpreter speed at boot in
 * the annotation kube32.io/interp-mops, measured on a fixed kernel"). The kernel is
 * `src/wasm/kernel/interp-mops.wat`, built into `build/interp-mops.wasm`; each iteration of its
 * loop executes a known number of WebAssembly instructions.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';

/** The repository's root, from `src/wasm/` or, once built, `dist/src/wasm/`. */
function repoRoot(): string {
  return new URL(import.meta.url.includes('/dist/src/wasm/') ? '../../../' : '../../', import.meta.url).pathname;
}

/** Path of the built kernel (`npm run build`): `build/interp-mops.wasm`. */
export function interpKernelPath(): string {
  return join(repoRoot(), 'build/interp-mops.wasm');
}

/** Path of the kernel's source. */
function kernelSourcePath(): string {
  return join(repoRoot(), 'src/wasm/kernel/interp-mops.wat');
}

/** The kernel's bytes: the build's, or built now from the source with wat2wasm when there is no build. */
function kernelBytes(): Uint8Array {
  const built = interpKernelPath();
  if (existsSync(built)) return readFileSync(built);
  const dir = mkdtempSync(join(tmpdir(), 'k32-mops-'));
  try {
    const out = join(dir, 'interp-mops.wasm');
    execFileSync('wat2wasm', [kernelSourcePath(), '-o', out], { stdio: 'pipe' });
    return readFileSync(out);
  } catch (err: unknown) {
    throw new Error(`interp-mops: no ${built} (run npm run build) and wat2wasm could not build the kernel: ${err instanceof Error ? err.message : String(err)}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// Runs in a worker thread, so that the node's event loop is not blocked while it measures.
const MEASURE = `
const { parentPort, workerData } = require('node:worker_threads');
const { bytes, targetMs, rounds } = workerData;
const inst = new WebAssembly.Instance(new WebAssembly.Module(bytes), {});
const run = inst.exports.run;
const ops = inst.exports.ops_per_iteration.value;
let n = 1 << 16;
// Warm up until the optimizing tier has the loop, and size n to about targetMs per round.
for (;;) {
  const t = performance.now();
  run(n);
  const ms = performance.now() - t;
  if (ms >= targetMs / 4 || n >= 1 << 30) { n = Math.min(2 ** 31 - 1, Math.ceil(n * targetMs / Math.max(ms, 0.01))); break; }
  n *= 2;
}
run(n);
let best = 0;
for (let r = 0; r < rounds; r++) {
  const t = performance.now();
  run(n);
  const s = (performance.now() - t) / 1000;
  best = Math.max(best, (n * ops) / s / 1e6);
}
parentPort.postMessage(best);
`;

/**
 * Measures millions of WebAssembly operations per second on the fixed kernel: warm-up, then the
 * best of 15 rounds of about 50 ms each (the best: a busy machine only ever slows a round down), in
 * a worker thread (about 1 s in all).
 * @returns MOPS rounded to one decimal (as the node annotation `kube32.io/interp-mops` reports it)
 * @throws Error when the kernel is neither built nor buildable (no wat2wasm)
 */
export async function measureInterpMops(): Promise<number> {
  const bytes = kernelBytes();
  const worker = new Worker(MEASURE, { eval: true, workerData: { bytes, targetMs: 50, rounds: 15 } });
  try {
    const mops = await new Promise<number>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`interp-mops worker exited with code ${code}`)));
    });
    return Math.round(mops * 10) / 10;
  } finally {
    await worker.terminate();
  }
}
