/**
 * Benchmarks of the pod runtime (issue 3, "Performance"), ratios measured in one run:
 *  1. requests per second through k32_handle of `echo` (HTTP, serveHttp) against a plain Node.js
 *     HTTP server answering the same bytes (target ≥ 0.5×), both driven by Debian's `wrk` (16
 *     connections, one thread) in a process of its own;
 *  2. freeze + snapshot + restore of a pod with 64 KiB, 1 MiB and 16 MiB of memory, against copying
 *     and hashing those bytes (target within 2× for 1 MiB and more), by phase, with absolute times
 *     (snapshots.ts: interleaved repetitions, the ratio taken per repetition);
 *  3. memory per idle pod: RSS growth for 100 idle `echo` pods, and how many a 24 GiB machine holds;
 *     3b. dense pods (configurePodThreads, issue 11): RSS and start time per idle `counter` pod, 100
 *     pods one a thread against 1000 pods 100 a shared thread, as ratios;
 *  4. kube32.io/interp-mops, measured three times (the seed: stable within 10% on an idle machine).
 * Run: node --expose-gc bench/runtime/index.ts [PARTS] [--runtime PATH] [--compare [LABEL=]PATH]   (or npm run bench runtime)
 * PARTS is a comma-separated list of 1, 2, 3, 4 (all by default); PATH is another copy of the
 * runtime's index.ts (an older commit's src/, copied out with `git archive HEAD~5 src | tar -x -C /tmp/old`):
 * --runtime measures it instead, --compare measures it beside this one in the same process, round by
 * round (parts 1 and 2), for before/after figures that the machine's load affects alike.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { availableParallelism, loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as Runtime from '../../src/wasm/index.ts';
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

/**
 * Requests per second against `port` for `ms`, with `concurrency` keep-alive connections, measured by
 * Debian's `wrk` (scripts/setup.sh installs it) in a process of its own: a Node.js client in this
 * process would share the event loop with the servers and cap the reference at its own speed.
 * @throws Error when wrk is missing, fails, or saw non-2xx answers or socket errors
 */
async function load(port: number, ms: number, concurrency: number): Promise<number> {
  const args = ['-t1', `-c${concurrency}`, `-d${Math.max(1, Math.round(ms / 1000))}s`, `http://127.0.0.1:${port}/bench?x=1`];
  const out = await new Promise<string>((resolve, reject) => {
    const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    child.stdout.on('data', (d: Buffer) => {
      text += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      text += d.toString();
    });
    child.on('error', (err) => reject(new Error(`cannot run wrk (apt-get install wrk, or scripts/setup.sh): ${err.message}`)));
    child.on('close', (code) => (code === 0 ? resolve(text) : reject(new Error(`wrk ${args.join(' ')} exited ${code}: ${text.trim()}`))));
  });
  const bad = /Non-2xx or 3xx responses: (\d+)|Socket errors: .*/.exec(out);
  if (bad) throw new Error(`wrk against port ${port}: ${bad[0]}`);
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(out);
  if (!rps) throw new Error(`wrk printed no Requests/sec: ${out.trim()}`);
  return Number(rps[1]);
}

/**
 * Part 1 for each runtime (before/after runs share the process): an echo pod behind serveHttp per
 * runtime and one plain server, loaded in rounds that alternate between them (the order turns each
 * round); the ratios are medians of each round's own ratio.
 */
async function benchRequests(runtimes: Array<[string, typeof Runtime]>): Promise<void> {
  const pods = await Promise.all(runtimes.map(async ([, rt]) => {
    const echo = await rt.loadModule(echoBytes(), { memoryLimitBytes: 16 << 20 });
    const pod = await rt.PodInstance.start({ module: echo, namespace: 'bench', podName: 'echo', containerName: 'echo' });
    const server = createServer(rt.serveHttp(() => pod));
    return { pod, server, port: await listen(server) };
  }));
  // The plain server answers exactly the bytes echo answers for the same request.
  const sample = await fetch(`http://127.0.0.1:${pods[0]!.port}/bench?x=1`);
  const sampleBody = Buffer.from(await sample.arrayBuffer());
  const plain = createServer((req, res) => {
    req.on('data', () => {});
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': sampleBody.length });
      res.end(sampleBody);
    });
  });
  const plainPort = await listen(plain);
  const ports = [plainPort, ...pods.map((p) => p.port)];
  for (const port of ports) await load(port, 1000, 16);
  const rounds = 5;
  const rps: number[][] = ports.map(() => []);
  for (let r = 0; r < rounds; r++) {
    for (let k = 0; k < ports.length; k++) {
      const i = (k + r) % ports.length;
      rps[i]!.push(await load(ports[i]!, 1000, 16));
    }
  }
  const avg = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
  console.log(`1. requests through k32_handle of echo (HTTP/1.1 keep-alive, wrk with 16 connections; ${rounds} alternating rounds of 1 s)`);
  console.log(`   plain Node HTTP server:   ${avg(rps[0]!).toFixed(0)} req/s`);
  runtimes.forEach(([label], i) => {
    const ratio = median(rps[i + 1]!.map((x, r) => x / rps[0]![r]!));
    console.log(`   pod via serveHttp (${label}): ${avg(rps[i + 1]!).toFixed(0)} req/s, ratio pod/plain ${ratio.toFixed(2)}x   (target >= 0.5x)`);
  });
  for (let i = 1; i < runtimes.length; i++) {
    console.log(`   ${runtimes[i]![0]} / ${runtimes[0]![0]}, round by round: ${median(rps[i + 1]!.map((x, r) => x / rps[1]![r]!)).toFixed(2)}x`);
  }
  // Calls straight into k32_handle, without HTTP, of the last runtime's pod.
  const pod = pods.at(-1)!.pod;
  const raw = new TextEncoder().encode('GET /bench?x=1 HTTP/1.1\r\nhost: bench\r\n\r\n');
  const n = 20_000;
  let t = performance.now();
  for (let i = 0; i < n; i++) await pod.handle(raw);
  const direct = n / ((performance.now() - t) / 1000);
  t = performance.now();
  for (let i = 0; i < n; i += 500) await Promise.all(Array.from({ length: 500 }, () => pod.handle(raw)));
  const pipelined = n / ((performance.now() - t) / 1000);
  console.log(`   pod.handle() without HTTP (${runtimes.at(-1)![0]}): ${direct.toFixed(0)} calls/s one at a time, ${pipelined.toFixed(0)} calls/s queued`);
  plain.close();
  for (const p of pods) {
    p.server.close();
    await p.pod.terminate();
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
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
const cmp = args.indexOf('--compare');
const compare = cmp >= 0 ? args.splice(cmp, 2)[1]! : undefined;
const parts = new Set((args[0] ?? '1,2,3,4').split(','));
const rt = (await import(pathToFileURL(runtimeIndex).href)) as typeof Runtime;
const runtimes: Array<[string, typeof Runtime]> = [['this', rt]];
if (compare) {
  const [label, path] = compare.includes('=') ? [compare.slice(0, compare.indexOf('=')), compare.slice(compare.indexOf('=') + 1)] : ['other', compare];
  runtimes.unshift([label, (await import(pathToFileURL(resolve(path)).href)) as typeof Runtime]);
}
console.log(`runtime: ${runtimeIndex}${compare ? `, compared with ${compare} (parts 1 and 2)` : ''}; load average ${loadavg()[0]!.toFixed(1)} on ${availableParallelism()} cores`);
if (parts.has('1')) await benchRequests(runtimes);
if (parts.has('2')) await benchSnapshots(runtimes);
if (parts.has('3')) benchIdleMemory(runtimeIndex);
if (parts.has('4')) {
  const mops = [await rt.measureInterpMops(), await rt.measureInterpMops(), await rt.measureInterpMops()];
  const spread = (Math.max(...mops) - Math.min(...mops)) / Math.max(...mops);
  console.log(`\n4. kube32.io/interp-mops, three runs: ${mops.join(', ')} MOPS; spread ${(spread * 100).toFixed(1)}% (target < 10% on an idle machine; load average now ${loadavg()[0]!.toFixed(1)})`);
}
process.exit(0);
