/**
 * Benchmarks of the pod runtime (issue 3, "Performance"), ratios measured in one run:
 *  1. requests per second through k32_handle of `echo` (HTTP, serveHttp) against a plain Node.js
 *     HTTP server answering the same bytes (target ≥ 0.5×);
 *  2. freeze + snapshot + restore of a pod with 64 KiB, 1 MiB and 16 MiB of memory, against copying
 *     and hashing those bytes (target within 2× for 1 MiB and more), by phase, with absolute times
 *     (snapshots.ts: interleaved repetitions, the ratio taken per repetition);
 *  3. memory per idle pod: RSS growth for 100 idle `echo` pods, and how many a 24 GiB machine holds;
 *     3b. dense pods (configurePodThreads, issue 11): RSS and start time per idle `counter` pod, 100
 *     pods one a thread against 1000 pods 100 a shared thread, as ratios;
 *  4. kube32.io/interp-mops, measured three times (the seed: stable within 10% on an idle machine).
 * Run: node --expose-gc bench/runtime/index.ts [PARTS] [--runtime path/to/wasm/index.ts]   (or npm run bench runtime)
 * PARTS is a comma-separated list of 1, 2, 3, 4 (all by default); --runtime measures another copy of
 * the runtime (an older commit's src/, copied out with `git archive`), for before/after figures.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { Agent, createServer, request, type Server } from 'node:http';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as Runtime from '../../src/wasm/index.ts';
import type { PodModule } from '../../src/wasm/index.ts';
import { benchSnapshots } from './snapshots.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

function echoBytes(): Uint8Array {
  const file = join(ROOT, 'build/examples/echo.wasm');
  if (!existsSync(file)) {
    const r = spawnSync('bash', [join(ROOT, 'scripts/build-examples.sh')], { cwd: ROOT, stdio: 'inherit' });
    if (r.status !== 0) throw new Error('build-examples failed');
  }
  return readFileSync(file);
}

async function listen(server: Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return (server.address() as { port: number }).port;
}

/** Requests per second against `port` for `ms`, with `concurrency` keep-alive connections. */
async function load(port: number, ms: number, concurrency: number): Promise<number> {
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  let done = 0;
  const end = performance.now() + ms;
  const one = (): Promise<void> =>
    new Promise((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path: '/bench?x=1', method: 'GET', agent }, (res) => {
        res.on('data', () => {});
        res.on('end', () => {
          if (res.statusCode !== 200) reject(new Error(`status ${res.statusCode}`));
          else resolve();
        });
      });
      req.on('error', reject);
      req.end();
    });
  const worker = async (): Promise<void> => {
    while (performance.now() < end) {
      await one();
      done++;
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  const s = (performance.now() - t0) / 1000;
  agent.destroy();
  return done / s;
}

async function benchRequests(rt: typeof Runtime, echo: PodModule): Promise<void> {
  const pod = await rt.PodInstance.start({ module: echo, namespace: 'bench', podName: 'echo', containerName: 'echo' });
  const podServer = createServer(rt.serveHttp(() => pod));
  const podPort = await listen(podServer);
  // The plain server answers exactly the bytes echo answers for the same request.
  const sample = await fetch(`http://127.0.0.1:${podPort}/bench?x=1`);
  const sampleBody = Buffer.from(await sample.arrayBuffer());
  const plain = createServer((req, res) => {
    req.on('data', () => {});
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': sampleBody.length });
      res.end(sampleBody);
    });
  });
  const plainPort = await listen(plain);
  await load(podPort, 500, 16);
  await load(plainPort, 500, 16);
  const rounds = 3;
  let podRps = 0;
  let plainRps = 0;
  for (let i = 0; i < rounds; i++) {
    podRps += await load(podPort, 1500, 16);
    plainRps += await load(plainPort, 1500, 16);
  }
  podRps /= rounds;
  plainRps /= rounds;
  // Calls straight into k32_handle, without HTTP, one at a time.
  const raw = new TextEncoder().encode('GET /bench?x=1 HTTP/1.1\r\nhost: bench\r\n\r\n');
  const n = 20_000;
  let t = performance.now();
  for (let i = 0; i < n; i++) await pod.handle(raw);
  const direct = n / ((performance.now() - t) / 1000);
  t = performance.now();
  for (let i = 0; i < n; i += 500) await Promise.all(Array.from({ length: 500 }, () => pod.handle(raw)));
  const pipelined = n / ((performance.now() - t) / 1000);
  console.log('1. requests through k32_handle of echo (HTTP/1.1 keep-alive, 16 connections, same process)');
  console.log(`   pod via serveHttp:        ${podRps.toFixed(0)} req/s`);
  console.log(`   plain Node HTTP server:   ${plainRps.toFixed(0)} req/s`);
  console.log(`   ratio pod/plain:          ${(podRps / plainRps).toFixed(2)}x   (target >= 0.5x)`);
  console.log(`   pod.handle() without HTTP: ${direct.toFixed(0)} calls/s one at a time, ${pipelined.toFixed(0)} calls/s queued`);
  podServer.close();
  plain.close();
  await pod.terminate();
}

/** Runs idle.ts in a fresh process: RSS per idle pod, start time per pod, threads used. */
function idleRun(index: string, wasm: string, n: number, perThread: number): { perPodBytes: number; startMs: number; threads: number } | string {
  const r = spawnSync(process.execPath, ['--expose-gc', join(ROOT, 'bench/runtime/idle.ts'), index, wasm, String(n), String(perThread)], { encoding: 'utf8' });
  if (r.status !== 0) return `failed: ${r.stderr.trim().split('\n').at(-1)}`;
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { perPodBytes: number; startMs: number; threads: number };
}

const MiB = 2 ** 20;

function benchIdleMemory(runtimeIndex: string): void {
  const n = 100;
  console.log(`\n3. idle pods: ${n} echo pods, each in its own worker thread (RSS growth of a fresh process)`);
  const variants: Array<[string, string]> = [['from source (.ts, Node strips types in each worker)', runtimeIndex]];
  const dist = join(ROOT, 'dist/src/wasm/index.js');
  if (existsSync(dist) && runtimeIndex === join(ROOT, 'src/wasm/index.ts')) variants.push(['built (dist/, npm run build)', dist]);
  else console.log('   (no dist/: run npm run build to measure the built runtime too)');
  for (const [label, index] of variants) {
    const r = idleRun(index, join(ROOT, 'build/examples/echo.wasm'), n, 1);
    if (typeof r === 'string') {
      console.log(`   ${label}: ${r}`);
      continue;
    }
    console.log(`   ${label}: ${(r.perPodBytes / MiB).toFixed(2)} MiB per idle pod, start ${r.startMs.toFixed(1)} ms per pod; a 24 GiB machine holds about ${Math.floor((24 * 2 ** 30) / r.perPodBytes)}`);
  }

  // Dense pods (configurePodThreads): idle counter pods, one a thread against 100 a shared thread.
  const counter = join(ROOT, 'build/examples/counter.wasm');
  const index = variants.at(-1)![1];
  const dense = 1000;
  console.log(`\n3b. dense pods: idle counter pods, ${n} one a thread against ${dense} packed 100 a shared thread (${variants.at(-1)![0].split(' (')[0]})`);
  const one = idleRun(index, counter, n, 1);
  const packed = idleRun(index, counter, dense, 100);
  if (typeof one === 'string' || typeof packed === 'string') {
    console.log(`   ${typeof one === 'string' ? one : ''} ${typeof packed === 'string' ? packed : ''}`);
    return;
  }
  console.log('   podsPerThread   pods   threads   RSS per idle pod   start per pod   pods in 24 GiB');
  for (const [ppt, pods, r] of [[1, n, one], [100, dense, packed]] as const) {
    console.log(`   ${String(ppt).padStart(13)} ${String(pods).padStart(6)} ${String(r.threads).padStart(9)} ${(r.perPodBytes / MiB).toFixed(3).padStart(14)} MiB ${r.startMs.toFixed(2).padStart(12)} ms ${String(Math.floor((24 * 2 ** 30) / r.perPodBytes)).padStart(16)}`);
  }
  console.log(`   ratios one-a-thread / dense: RSS per pod ${(one.perPodBytes / packed.perPodBytes).toFixed(1)}x, start per pod ${(one.startMs / packed.startMs).toFixed(1)}x   (target: dense well under 1 MiB a pod)`);
}

const args = process.argv.slice(2);
const at = args.indexOf('--runtime');
const runtimeIndex = at >= 0 ? resolve(args.splice(at, 2)[1]!) : join(ROOT, 'src/wasm/index.ts');
const parts = new Set((args[0] ?? '1,2,3,4').split(','));
const rt = (await import(pathToFileURL(runtimeIndex).href)) as typeof Runtime;
console.log(`runtime: ${runtimeIndex}; load average ${(await import('node:os')).loadavg()[0]!.toFixed(1)} on ${(await import('node:os')).availableParallelism()} cores`);
if (parts.has('1')) await benchRequests(rt, await rt.loadModule(echoBytes(), { memoryLimitBytes: 16 << 20 }));
if (parts.has('2')) await benchSnapshots([['this', rt]]);
if (parts.has('3')) benchIdleMemory(runtimeIndex);
if (parts.has('4')) {
  const mops = [await rt.measureInterpMops(), await rt.measureInterpMops(), await rt.measureInterpMops()];
  const spread = (Math.max(...mops) - Math.min(...mops)) / Math.max(...mops);
  console.log(`\n4. kube32.io/interp-mops, three runs: ${mops.join(', ')} MOPS; spread ${(spread * 100).toFixed(1)}% (target < 10% on an idle machine; load average now ${(await import('node:os')).loadavg()[0]!.toFixed(1)})`);
}
process.exit(0);
