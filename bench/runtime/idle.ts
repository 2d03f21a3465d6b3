/**
 * Part 3 of bench/runtime, in a process of its own so that nothing else is in its heap: RSS growth
 * for N idle pods of one module, with pods packed P a thread (configurePodThreads).
 * Usage: node --expose-gc bench/runtime/idle.ts <runtime index> <module.wasm> [N=100] [P=1]
 * where the runtime is src/wasm/index.ts (run from source) or dist/src/wasm/index.js (built).
 * Prints one JSON line: { perPodBytes, startMs, threads } (bytes of RSS per pod, ms of start per pod
 * when started one after another, pod threads used).
 */
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import type * as Runtime from '../../src/wasm/index.ts';

const [indexPath, modulePath, count, perThread] = process.argv.slice(2);
const n = Number(count ?? 100);
const rt = (await import(pathToFileURL(indexPath!).href)) as typeof Runtime;
rt.configurePodThreads({ podsPerThread: Number(perThread ?? 1) });
const gc = (globalThis as { gc?: () => void }).gc ?? (() => {});
/** Lets the threads settle (their own GCs, freed young generations): a fixed pause, this is a measurement, not a test. */
const settle = async (): Promise<void> => {
  gc();
  await new Promise((r) => setTimeout(r, 500));
  gc();
};
const mod = await rt.loadModule(readFileSync(modulePath!));
await rt.warmWorkerPool();
await settle();
const before = process.memoryUsage().rss;
const pods: Runtime.PodInstance[] = [];
const t = performance.now();
for (let i = 0; i < n; i++) pods.push(await rt.PodInstance.start({ module: mod, namespace: 'bench', podName: `idle-${i}`, containerName: 'idle' }));
const startMs = (performance.now() - t) / n;
const raw = new TextEncoder().encode('GET / HTTP/1.1\r\nhost: bench\r\n\r\n');
await Promise.all(pods.map((p) => p.handle(raw)));
await settle();
const after = process.memoryUsage().rss;
const counts = rt.podThreadCounts();
const threads = Number(perThread ?? 1) > 1 ? counts.shared.length : n;
process.stdout.write(`${JSON.stringify({ perPodBytes: (after - before) / n, startMs, threads })}\n`);
await Promise.all(pods.map((p) => p.terminate()));
await rt.drainWorkerPool();
