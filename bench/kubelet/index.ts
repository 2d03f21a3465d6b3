/**
 * kube32-sim benchmark (issue 5, "Performance"):
 *
 * 1. Freeze to snapshot bytes on the wire, for a 32 KB pod and a 1 MiB pod: `POST /checkpoint`
 *    through the API server's node proxy (the control plane's path) and straight to the kubelet
 *    endpoint, until the last byte is read; against the runtime's own freeze + snapshot + read of
 *    the same module in this process, in the same run. (The seed measured 856 ms for 32 KB on a
 *    Cardputer.)
 * 2. The most idle `echo` pods one worker holds in 4 GiB: a worker with `--heap 4Gi` runs N idle
 *    pods; its resident memory per pod gives how many fit in 4 GiB, next to the heap's own bound.
 *
 * Prints figures and ratios; asserts nothing about time. Run: `node --expose-gc bench/kubelet/index.ts`
 * (or `npm run bench kubelet`). Needs wat2wasm; `npm run build` for the echo example (else the fixture).
 */
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { HttpMethod, RequestContext, type V1Pod, type V1PodList } from '@kubernetes/client-node';
import { fetch } from 'undici';
import { startApiServer } from '../../test/helpers/apiserver.ts';
import { claimLoopbackRange, unusedPort } from '../../test/helpers/ports.ts';
import { readBytes } from '../../src/api/index.ts';
import { ControlPlane } from '../../src/kubelet/client.ts';
import { loadModule, PodInstance } from '../../src/wasm/index.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const ITER = Number(process.env.BENCH_ITER ?? 20);
const IDLE_PODS = Number(process.env.BENCH_IDLE_PODS ?? 40);
const GiB = 2 ** 30;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/** Ports handed to pods so far: each pod gets its own, below the ephemeral range (test/helpers/ports.ts). */
const handedOut = new Set<number>();
const freePort = (address: string): Promise<number> => unusedPort(address, handedOut);

async function until<T>(what: string, fn: () => Promise<T | undefined | false>, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined && v !== false) return v as T;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m?.[1] ?? 0) * 1024;
}

const tmp = mkdtempSync(join(tmpdir(), 'k32-bench-kubelet-'));
const api = await startApiServer();
// Two workers on a loopback /24 of the benchmark's own: test suites running meanwhile use others.
const prefix = await claimLoopbackRange();
const [addr1, addr2] = [`${prefix}.2`, `${prefix}.3`];
const children: ReturnType<typeof spawn>[] = [];
try {
  const admin = new ControlPlane(api.kubeConfig);
  const wat = readFileSync(join(ROOT, 'test/kubelet/fixtures/counter.wat'), 'utf8');
  const build = (name: string, pages: number): Uint8Array => {
    writeFileSync(join(tmp, `${name}.wat`), wat.replace('(memory (export "memory") 1)', `(memory (export "memory") ${pages})`));
    execFileSync('wat2wasm', [join(tmp, `${name}.wat`), '-o', join(tmp, `${name}.wasm`)]);
    return new Uint8Array(readFileSync(join(tmp, `${name}.wasm`)));
  };
  const sizes = [
    { label: '32 KB', module: 'bench-32k', bytes: build('bench-32k', 1), limit: 32_000 },
    { label: '1 MiB', module: 'bench-1m', bytes: build('bench-1m', 16), limit: 1024 * 1024 },
  ];
  for (const s of sizes) await admin.json('PUT', `/apis/kube32.io/v1/modules/${s.module}/data`, { body: s.bytes, contentType: 'application/octet-stream' });
  const echoPath = join(ROOT, 'build/examples/echo.wasm');
  const echo = existsSync(echoPath) ? new Uint8Array(readFileSync(echoPath)) : sizes[0]!.bytes;
  await admin.json('PUT', '/apis/kube32.io/v1/modules/bench-echo/data', { body: echo, contentType: 'application/octet-stream' });

  const startWorker = async (name: string, address: string, extra: string[]) => {
    const proc = spawn(process.execPath, [join(ROOT, 'bin/kube32-sim.js'), '--kubeconfig', await api.nodeKubeconfig(name), '--name', name, '--address', address, '--kubelet-port', '0', '--data-dir', join(tmp, name), '--interp-mops', '1000', ...extra], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, LOG_LEVEL: 'warn' } });
    children.push(proc);
    let out = '';
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
    });
    await until(`worker ${name}`, async () => out.includes('ready:'));
    return proc;
  };
  const pod = (name: string, node: string, image: string, port: number, memory: string): V1Pod => ({
    apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'default' },
    spec: { nodeName: node, containers: [{ name: 'c', image: `wasm://${image}`, ports: [{ containerPort: port }], resources: { limits: { memory } } }] },
  });

  // 1. Freeze to snapshot bytes on the wire.
  await startWorker('bench-w1', addr1, ['--heap', '64Mi']);
  const node = await admin.json<{ status: { daemonEndpoints: { kubeletEndpoint: { Port: number } } } }>('GET', '/api/v1/nodes/bench-w1');
  const kubeletUrl = `http://${addr1}:${node.status.daemonEndpoints.kubeletEndpoint.Port}`;
  const ctx = new RequestContext(api.url, HttpMethod.GET);
  await api.kubeConfig.applySecurityAuthentication(ctx);
  const authorization = (ctx.getHeaders() as Record<string, string>).Authorization ?? (ctx.getHeaders() as Record<string, string>).authorization ?? '';
  console.log(`freeze to snapshot bytes on the wire (median of ${ITER}; leave=running)`);
  console.log('pod     snapshot bytes   node proxy ms   kubelet ms   runtime ms   proxy/runtime   kubelet/runtime');
  for (const s of sizes) {
    await admin.json('POST', '/api/v1/namespaces/default/pods', { body: pod(s.module, 'bench-w1', s.module, await freePort(addr1), String(s.limit)) });
    await until(`${s.module} Running`, async () => (await admin.json<V1Pod>('GET', `/api/v1/namespaces/default/pods/${s.module}`)).status?.phase === 'Running');
    const viaProxy: number[] = [];
    const direct: number[] = [];
    let size = 0;
    for (let i = 0; i < ITER; i++) {
      let t0 = performance.now();
      const r = await admin.request('POST', `/api/v1/nodes/bench-w1/proxy/checkpoint/default/${s.module}/c`);
      size = (await readBytes(r.body)).byteLength;
      if (r.status !== 200) throw new Error(`checkpoint via proxy: ${r.status}`);
      viaProxy.push(performance.now() - t0);
      t0 = performance.now();
      const d = await fetch(`${kubeletUrl}/checkpoint/default/${s.module}/c`, { method: 'POST', headers: { authorization } });
      await d.arrayBuffer();
      if (d.status !== 200) throw new Error(`checkpoint direct: ${d.status}`);
      direct.push(performance.now() - t0);
    }
    const m = await loadModule(s.bytes, { memoryLimitBytes: s.limit });
    const inst = await PodInstance.start({ module: m, namespace: 'default', podName: 'bench', containerName: 'c' });
    const own: number[] = [];
    for (let i = 0; i < ITER; i++) {
      const t0 = performance.now();
      await inst.freeze(10_000);
      const snap = await inst.snapshot({ digest: true });
      const h = createHash('sha256');
      for await (const chunk of snap.chunks) h.update(chunk);
      own.push(performance.now() - t0);
      await inst.thaw();
    }
    await inst.terminate();
    const [p, k, o] = [median(viaProxy), median(direct), median(own)];
    console.log(`${s.label.padEnd(8)}${String(size).padStart(14)}${p.toFixed(2).padStart(16)}${k.toFixed(2).padStart(13)}${o.toFixed(2).padStart(13)}${(p / o).toFixed(2).padStart(16)}${(k / o).toFixed(2).padStart(18)}`);
  }
  console.log('(seed: 856 ms for a 32 KB pod on an ESP32-S3 Cardputer)');

  // 2. Idle echo pods in 4 GiB.
  const w2 = await startWorker('bench-w2', addr2, ['--heap', '4Gi', '--max-pods', '100000']);
  global.gc?.();
  const base = rssBytes(w2.pid!);
  for (let i = 0; i < IDLE_PODS; i++) {
    await admin.json('POST', '/api/v1/namespaces/default/pods', { body: pod(`echo-${i}`, 'bench-w2', 'bench-echo', await freePort(addr2), '64Ki') });
  }
  await until('idle pods Running', async () => {
    const list = await admin.json<V1PodList>('GET', '/api/v1/namespaces/default/pods', { query: { fieldSelector: 'spec.nodeName=bench-w2' } });
    return list.items.filter((p) => p.status?.phase === 'Running').length === IDLE_PODS;
  }, 180_000);
  const loaded = rssBytes(w2.pid!);
  const perPod = (loaded - base) / IDLE_PODS;
  const byRss = Math.floor((4 * GiB - base) / perPod);
  const byHeap = Math.floor((4 * GiB - 24 * 1024) / (64 * 1024));
  console.log(`\nidle echo pods in 4 GiB: ${IDLE_PODS} pods ran; worker RSS ${(base / 2 ** 20).toFixed(0)} MiB empty, ${(loaded / 2 ** 20).toFixed(0)} MiB with them`);
  console.log(`  resident memory per idle pod: ${(perPod / 2 ** 20).toFixed(2)} MiB -> ${byRss} pods fit in 4 GiB of process memory`);
  console.log(`  the heap's own bound (64 KiB pods, --heap 4Gi, MemoryPressure at 24 KiB free): ${byHeap} pods`);
  console.log(`  most idle echo pods one worker holds in 4 GiB: ${Math.min(byRss, byHeap)} (bounded by ${byRss < byHeap ? 'process memory (a worker thread per pod)' : 'the heap'})`);
} finally {
  for (const c of children) c.kill('SIGKILL');
  await api.stop();
  rmSync(tmp, { recursive: true, force: true });
}
