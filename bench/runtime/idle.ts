/**
 * Part 3 of bench/runtime, in a process of its own so that nothing else is in its heap: RSS growth
 * for N idle echo pods. Usage: node --expose-gc bench/runtime/idle.ts <runtime index> <echo.wasm> [N]
 * where the runtime is src/wasm/index.ts (run from source) or dist/src/wasm/index.js (built).
 * Prints one JSON line: { perPodBytes, startMs }.
 */
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import type * as Runtime from '../../src/wasm/index.ts';

const [indexPath, echoPath, count] = process.argv.slice(2);
const n = Number(count ?? 100);
const rt = (await import(pathToFileURL(indexPath!).href)) as typeof Runtime;
const gc = (globalThis as { gc?: () => void }).gc ?? (() => {});
const settle = async (): Promise<void> => {
  gc();
  await new Promise((r) => setTimeout(r, 500));
  gc();
};
const echo = await rt.loadModule(readFileSync(echoPath!));
await rt.warmWorkerPool();
await settle();
const before = process.memoryUsage().rss;
const pods: Runtime.PodInstance[] = [];
const t = performance.now();
for (let i = 0; i < n; i++) pods.push(await rt.PodInstance.start({ module: echo, namespace: 'bench', podName: `echo-${i}`, containerName: 'echo' }));
const startMs = (performance.now() - t) / n;
const raw = new TextEncoder().encode('GET / HTTP/1.1\r\nhost: bench\r\n\r\n');
await Promise.all(pods.map((p) => p.handle(raw)));
await settle();
const after = process.memoryUsage().rss;
process.stdout.write(`${JSON.stringify({ perPodBytes: (after - before) / n, startMs })}\n`);
await Promise.all(pods.map((p) => p.terminate()));
await rt.drainWorkerPool();
