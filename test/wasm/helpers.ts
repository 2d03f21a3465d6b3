/**
 * Helpers of the pod runtime's tests: WAT fixtures built with wat2wasm at test time, the examples
 * built by scripts/build-examples.sh when the build is missing, pods started and collected.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeSnapshot, type DecodedSnapshot } from '../../src/k32s/index.ts';
import { configurePodThreads, PodInstance, type PodModule, type PodStartOptions } from '../../src/wasm/index.ts';

/**
 * K32_PODS_PER_THREAD=N runs every suite that imports this file with dense pods (N pods a shared
 * thread), so that the whole runtime suite passes both ways (`npm test` runs it once as is; CI
 * runs test/wasm again with K32_PODS_PER_THREAD=8, see docs/wasm-runtime.md).
 */
const podsPerThread = process.env.K32_PODS_PER_THREAD;
if (podsPerThread) configurePodThreads({ podsPerThread: Number(podsPerThread) });
/** True when the suites run with dense pods (K32_PODS_PER_THREAD > 1). */
export const DENSE = Number(podsPerThread ?? 1) > 1;

export const ROOT = new URL('../../', import.meta.url).pathname;
export const FIXTURES = join(ROOT, 'test/fixtures/wasm');

/** A temporary directory, removed by the returned function. */
export function tempDir(prefix: string): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), `k32-${prefix}-`));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Builds WAT text (or a fixture file name) into a module's bytes with wat2wasm. */
export function wat(textOrFile: string, flags: string[] = []): Uint8Array {
  const t = tempDir('wat');
  try {
    let src = join(FIXTURES, textOrFile);
    if (!textOrFile.endsWith('.wat')) {
      src = join(t.dir, 'm.wat');
      writeFileSync(src, textOrFile);
    }
    const out = join(t.dir, 'm.wasm');
    execFileSync('wat2wasm', [...flags, src, '-o', out], { stdio: 'pipe' });
    return readFileSync(out);
  } finally {
    t.remove();
  }
}

/** The bytes of an example pod, building the examples first when the build is missing. */
export function example(name: 'echo' | 'counter' | 'counter-c'): Uint8Array {
  const file = join(ROOT, 'build/examples', `${name}.wasm`);
  if (!existsSync(file)) {
    const r = spawnSync('bash', [join(ROOT, 'scripts/build-examples.sh')], { cwd: ROOT, encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`build-examples failed: ${r.stderr}`);
  }
  return readFileSync(file);
}

const enc = new TextEncoder();
const dec = new TextDecoder();

/** A raw GET request message. */
export function get(path: string, headers = ''): Uint8Array {
  return enc.encode(`GET ${path} HTTP/1.1\r\nhost: pod\r\n${headers}\r\n`);
}

/** The body of a raw response. */
export function body(raw: Uint8Array): string {
  const text = dec.decode(raw);
  return text.slice(text.indexOf('\r\n\r\n') + 4);
}

/** Starts a pod with test defaults; terminated by `t.after` through the returned list. */
export async function startPod(module: PodModule, opts: Partial<PodStartOptions> = {}): Promise<PodInstance> {
  return PodInstance.start({ module, namespace: 'test', podName: 'p', containerName: 'c', ...opts });
}

/** Streams a frozen pod's snapshot into one buffer. */
export async function snapshotBytes(pod: PodInstance): Promise<Uint8Array> {
  const s = await pod.snapshot();
  const parts: Uint8Array[] = [];
  for await (const c of s.chunks) parts.push(c);
  const all = Buffer.concat(parts);
  if (all.length !== s.byteLength) throw new Error(`snapshot has ${all.length} bytes, announced ${s.byteLength}`);
  return all;
}

/** Decodes a snapshot (memory kept). */
export function decode(bytes: Uint8Array): Promise<DecodedSnapshot> {
  return decodeSnapshot([bytes]);
}

/** Yields `bytes` in pieces of `size`. */
export async function* pieces(bytes: Uint8Array, size: number): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < bytes.length; i += size) yield bytes.subarray(i, i + size);
}

/** The numbers the state.wat fixture answers: requests, ticks, events, restored, inits, time, result. */
export function stateNumbers(raw: Uint8Array): { requests: number; ticks: bigint; events: number; restored: number; inits: number; time: number; result: bigint } {
  const n = body(raw).trim().split(' ').map((x) => BigInt.asIntN(64, BigInt(x)));
  return { requests: Number(n[0]), ticks: n[1]!, events: Number(n[2]), restored: Number(n[3]), inits: Number(n[4]), time: Number(n[5]), result: n[6]! };
}
