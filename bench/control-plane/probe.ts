/**
 * The API client of bench/control-plane, in a process of its own (so that its timings are a client's,
 * not those of the process that watches 10 000 pods): while the benchmark runs it times
 *
 * - mutating calls, one every 100 ms: create a ConfigMap, patch it, delete it (Kubernetes' SLI
 *   "mutating API call latency", SLO p99 <= 1 s);
 * - list calls, one every 500 ms, alternately `GET /api/v1/nodes` (cluster scope, 100 objects) and
 *   `GET /api/v1/namespaces/default/pods?limit=500` (the first page `kubectl get pods` asks for)
 *   (SLI "non-streaming read-only API call latency", SLO p99 <= 5 s namespaced, 30 s cluster).
 *
 * It stops when its standard input ends and prints one JSON line: the samples in ms per kind.
 *
 *   node bench/control-plane/probe.ts KUBECONFIG
 */
import { CoreV1Api, KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';

const kc = new KubeConfig();
kc.loadFromFile(process.argv[2]!);
const core = kc.makeApiClient(CoreV1Api);
const MERGE = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

const samples: Record<string, number[]> = { create: [], patch: [], delete: [], listNodes: [], listPods500: [] };
let errors = 0;
const errorMessages: string[] = [];
let stopping = false;

async function timed(kind: string, fn: () => Promise<unknown>): Promise<void> {
  const t0 = performance.now();
  try {
    await fn();
    samples[kind]!.push(performance.now() - t0);
  } catch (err: unknown) {
    errors++;
    if (errorMessages.length < 3) errorMessages.push(`${kind}: ${err instanceof Error ? err.message.slice(0, 200) : String(err)}`);
  }
}

/** Paces a loop: the next round starts `everyMs` after the previous one started (or at once when late). */
function pace(startedAt: number, everyMs: number): Promise<void> {
  const wait = startedAt + everyMs - performance.now();
  return wait > 0 ? new Promise((r) => setTimeout(r, wait)) : Promise.resolve();
}

async function mutating(): Promise<void> {
  for (let i = 0; !stopping; i++) {
    const t0 = performance.now();
    const name = `probe-${process.pid}-${i}`;
    await timed('create', () => core.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name }, data: { k: 'v' } } }));
    await timed('patch', () => core.patchNamespacedConfigMap({ name, namespace: 'default', body: { data: { k: 'w' } } }, MERGE));
    await timed('delete', () => core.deleteNamespacedConfigMap({ name, namespace: 'default' }));
    await pace(t0, 100);
  }
}

async function lists(): Promise<void> {
  for (let i = 0; !stopping; i++) {
    const t0 = performance.now();
    if (i % 2 === 0) await timed('listNodes', () => core.listNode());
    else await timed('listPods500', () => core.listNamespacedPod({ namespace: 'default', limit: 500 }));
    await pace(t0, 500);
  }
}

process.stdin.resume();
process.stdin.on('end', () => {
  stopping = true;
});
await Promise.all([mutating(), lists()]);
process.stdout.write(`${JSON.stringify({ samples, errors, errorMessages })}\n`);
