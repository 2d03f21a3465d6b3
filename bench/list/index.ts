/**
 * `kubectl get pods -A` at 10 000 pods (issue 20's goal: under 2 s p99; docs/scale.md, "Listing
 * 10 000 pods with kubectl"). One API server process (`kube32-cli apiserver`, SQLite by default,
 * `--storage etcd` on an etcd of its own), `--pods N` pods spread over namespaces of 1 000, then,
 * `--runs K` times each, the variants alternating run by run so that the machine's load falls on
 * all alike:
 *
 * - the real `kubectl` v1.32 (a warm discovery cache, as a user's): `kubectl version` (kubectl's own
 *   start and one request), `kubectl get pods -A` (the Table, kubectl's default `--chunk-size=500`),
 *   the same with `--chunk-size=0` and with pages of a tenth of the list (10 requests: client-go's
 *   burst), and `-o name` (the whole JSON list decoded by kubectl) chunked
 *   and not: each timed end to end, p50 / p99 in ms, with kubectl's CPU time (GNU time) and the API
 *   server's (`/proc`) meanwhile, p50: what the run costs either side whatever the machine's load;
 * - the server's own time, from a plain Node.js HTTPS client on a keep-alive connection: the pages of
 *   `GET /api/v1/pods?limit=500` one after the other (JSON, and the Table kubectl asks for), per page
 *   and summed over the list, and one unchunked GET of the Table and of the JSON list;
 * - one `kubectl get pods -A -v=6` with and without chunking: its pages and the lines client-go logs
 *   as "Waited for ... due to client-side throttling" (it logs waits over 50 ms), summed;
 *
 * and the ratio of the Table list's time chunked to unchunked. Prints figures; asserts nothing about time.
 *
 *   node bench/list/index.ts [--pods 10000] [--runs 10] [--storage sqlite|etcd]
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startEtcd } from '../../test/apiserver-etcd/etcd-server.ts';
import { run } from '../../test/e2e/cluster.ts';
import { startApiServer, type TestApiServer } from '../../test/helpers/apiserver.ts';
import { type Call, caller, cpuSeconds, pct, pool } from '../helpers.ts';

const { values } = parseArgs({
  options: {
    pods: { type: 'string', default: '10000' },
    runs: { type: 'string', default: '10' },
    storage: { type: 'string', default: 'sqlite' },
  },
});
const PODS = Number(values.pods);
const RUNS = Number(values.runs);
const STORAGE = values.storage;
for (const [flag, v] of Object.entries({ pods: PODS, runs: RUNS })) {
  if (!Number.isInteger(v) || v < 1) throw new RangeError(`--${flag} must be a whole number of 1 or more: current value is ${v}`);
}
if (STORAGE !== 'sqlite' && STORAGE !== 'etcd') throw new RangeError(`--storage must be sqlite or etcd: current value is ${STORAGE}`);
/** kubectl's default page (`--chunk-size`). */
const CHUNK = 500;
/** What kubectl's `get` asks for (its Accept header, as `-v=8` shows it). */
const TABLE = 'application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json';
const PER_NAMESPACE = 1000;
/** A page size that lists every pod in 10 requests, the burst of client-go's rate limiter. */
const BURST_CHUNK = Math.max(1, Math.ceil(PODS / 10));
const NAMESPACES = Math.ceil(PODS / PER_NAMESPACE);

const podBody = (i: number) => ({
  metadata: { name: `pod-${i}`, labels: { app: 'list', i: String(i) } },
  spec: { nodeName: `node-${i % 100}`, containers: [{ name: 'c', image: 'wasm-free:1', ports: [{ containerPort: 8080 }], resources: { limits: { memory: '1Mi' } } }] },
});

/** The pages of one list, one after the other: each page's time (to its last byte) and the items counted. */
async function pages(call: Call, accept: string): Promise<{ times: number[]; items: number }> {
  const times: number[] = [];
  let token = '';
  let items = 0;
  do {
    const t0 = performance.now();
    const r = await call('GET', `/api/v1/pods?limit=${CHUNK}${token ? `&continue=${encodeURIComponent(token)}` : ''}`, undefined, undefined, accept);
    times.push(performance.now() - t0);
    if (r.status !== 200) throw new Error(`GET /api/v1/pods page: ${r.status} ${r.text.slice(0, 300)}`);
    const page = JSON.parse(r.text) as { items?: unknown[]; rows?: unknown[]; metadata: { continue?: string } };
    items += (page.items ?? page.rows ?? []).length;
    token = page.metadata.continue ?? '';
  } while (token);
  if (items !== PODS) throw new Error(`the paged list had ${items} items of ${PODS}`);
  return { times, items };
}

/** One unchunked GET of every pod with `accept`: its time, ms. */
async function whole(call: Call, accept: string): Promise<number> {
  const t0 = performance.now();
  const r = await call('GET', '/api/v1/pods', undefined, undefined, accept);
  const ms = performance.now() - t0;
  if (r.status !== 200) throw new Error(`GET /api/v1/pods: ${r.status} ${r.text.slice(0, 300)}`);
  const body = JSON.parse(r.text) as { items?: unknown[]; rows?: unknown[] };
  if ((body.items ?? body.rows ?? []).length !== PODS) throw new Error(`the unchunked list had ${(body.items ?? body.rows ?? []).length} items of ${PODS}`);
  return ms;
}

/** A kubectl variant: its arguments and the lines its output must have. */
interface Variant {
  name: string;
  args: string[];
  lines?: number;
}

const uptime = () => execFileSync('uptime', { encoding: 'utf8' }).trim();

async function main(): Promise<void> {
  const cleanups: (() => unknown)[] = [];
  let api: TestApiServer | undefined;
  const uptimeBefore = uptime();
  try {
    let args: string[] = [];
    if (STORAGE === 'etcd') {
      const etcd = await startEtcd({ after: (fn) => cleanups.push(fn) });
      args = ['--storage', 'etcd', '--etcd-endpoints', etcd.url];
    }
    api = await startApiServer(undefined, { args, env: { LOG_LEVEL: 'warn' } });
    const { call, agent } = caller(api);
    cleanups.push(() => agent.destroy());
    for (let n = 0; n < NAMESPACES; n++) {
      const r = await call('POST', '/api/v1/namespaces', { metadata: { name: `list-${n}` } });
      if (r.status !== 201) throw new Error(`create namespace list-${n}: ${r.status} ${r.text}`);
    }
    const tCreate = await pool(PODS, 16, async (i) => {
      const r = await call('POST', `/api/v1/namespaces/list-${Math.floor(i / PER_NAMESPACE)}/pods`, podBody(i));
      if (r.status !== 201) throw new Error(`create pod-${i}: ${r.status} ${r.text}`);
    });
    console.log(`${STORAGE}: created ${PODS} pods in ${NAMESPACES} namespaces in ${tCreate.toFixed(1)} s (${(PODS / tCreate).toFixed(0)}/s)`);

    const cacheDir = mkdtempSync(join(api.dataDir, 'kubectl-cache-'));
    const timeFile = join(api.dataDir, 'kubectl-time');
    const apiPid = api.proc.pid!;
    /** kubectl under GNU time (`-o`: its CPU seconds in a file of their own, out of kubectl's output). */
    const kubectl = (a: string[]) => run('/usr/bin/time', ['-f', '%U %S', '-o', timeFile, 'kubectl', '--kubeconfig', api!.kubeconfigPath, '--cache-dir', cacheDir, ...a], { timeoutMs: 300_000 });
    const kubectlCpuMs = () => readFileSync(timeFile, 'utf8').trim().split(/\s+/).slice(-2).reduce((a, x) => a + 1000 * Number(x), 0);
    const variants: Variant[] = [
      { name: 'kubectl version (its start, one request)', args: ['version', '-o', 'json'] },
      { name: `kubectl get pods -A (Table, chunks of ${CHUNK})`, args: ['get', 'pods', '-A'], lines: PODS + 1 },
      { name: 'kubectl get pods -A --chunk-size=0', args: ['get', 'pods', '-A', '--chunk-size=0'], lines: PODS + 1 },
      // Pages of a tenth of the list: 10 requests, the rate limiter's burst, so none waits.
      { name: `kubectl get pods -A --chunk-size=${BURST_CHUNK} (10 pages)`, args: ['get', 'pods', '-A', `--chunk-size=${BURST_CHUNK}`], lines: PODS + 1 },
      { name: `kubectl get pods -A -o name (JSON, chunks of ${CHUNK})`, args: ['get', 'pods', '-A', '-o', 'name'], lines: PODS },
      { name: 'kubectl get pods -A -o name --chunk-size=0', args: ['get', 'pods', '-A', '-o', 'name', '--chunk-size=0'], lines: PODS },
    ];
    /** One run of a variant: its wall time, kubectl's CPU time and the API server's meanwhile, ms. */
    const runOnce = async (v: Variant): Promise<{ wall: number; kubectl: number; server: number }> => {
      const c0 = cpuSeconds(apiPid);
      const t0 = performance.now();
      const r = await kubectl(v.args);
      const wall = performance.now() - t0;
      const server = 1000 * (cpuSeconds(apiPid) - c0);
      if (r.code !== 0) throw new Error(`kubectl ${v.args.join(' ')} exited ${r.code}: ${r.stderr.slice(0, 500)}`);
      const lines = r.stdout.split('\n').filter((l) => l).length;
      if (v.lines !== undefined && lines !== v.lines) throw new Error(`kubectl ${v.args.join(' ')} printed ${lines} lines, not ${v.lines}`);
      return { wall, kubectl: kubectlCpuMs(), server };
    };
    // Warm-up (not counted): the discovery cache, the server's first lists.
    for (const v of variants) await runOnce(v);
    await pages(call, TABLE);

    const load0 = loadavg().map((x) => x.toFixed(2)).join(' ');
    const times = new Map<string, { wall: number; kubectl: number; server: number }[]>(variants.map((v) => [v.name, []]));
    const server = { jsonPage: [] as number[], jsonList: [] as number[], tablePage: [] as number[], tableList: [] as number[], tableWhole: [] as number[], jsonWhole: [] as number[] };
    /** The API server's CPU ms for each paged Table list and unchunked Table GET. */
    const serverCpu = { tableList: [] as number[], tableWhole: [] as number[] };
    const cpuOf = async <T>(into: number[], fn: () => Promise<T>): Promise<T> => {
      const c0 = cpuSeconds(apiPid);
      const out = await fn();
      into.push(1000 * (cpuSeconds(apiPid) - c0));
      return out;
    };
    for (let k = 0; k < RUNS; k++) {
      for (const v of variants) times.get(v.name)!.push(await runOnce(v));
      const j = await pages(call, 'application/json');
      server.jsonPage.push(...j.times);
      server.jsonList.push(j.times.reduce((a, b) => a + b, 0));
      const tb = await cpuOf(serverCpu.tableList, () => pages(call, TABLE));
      server.tablePage.push(...tb.times);
      server.tableList.push(tb.times.reduce((a, b) => a + b, 0));
      server.tableWhole.push(await cpuOf(serverCpu.tableWhole, () => whole(call, TABLE)));
      server.jsonWhole.push(await whole(call, 'application/json'));
    }

    // What client-go logs of its rate limiter (QPS 5, burst 10 for kubectl's non-discovery requests).
    const throttle = async (extra: string[]) => {
      const r = await kubectl(['get', 'pods', '-A', '-v=6', ...extra]);
      if (r.code !== 0) throw new Error(`kubectl get pods -A -v=6 exited ${r.code}: ${r.stderr.slice(0, 500)}`);
      const waits = [...r.stderr.matchAll(/Waited for ([\d.]+)(µs|ms|s) due to client-side throttling/g)].map((m) => Number(m[1]) * (m[2] === 's' ? 1000 : m[2] === 'ms' ? 1 : 0.001));
      const gets = r.stderr.split('\n').filter((l) => /GET https:\/\/[^/\s]+\/api\/v1\/pods[?\s]/.test(l)).length;
      return { gets, waits: waits.length, waited: waits.reduce((a, b) => a + b, 0) };
    };
    const thr = await throttle([]);
    const thr0 = await throttle(['--chunk-size=0']);
    const load1 = loadavg().map((x) => x.toFixed(2)).join(' ');

    const ms = (x: number) => `${x.toFixed(0)} ms`;
    const row = (what: string, ...cells: string[]) => console.log(`${what.padEnd(58)} ${cells.map((c) => c.padStart(11)).join(' ')}`);
    console.log(`\n${PODS} pods, ${STORAGE}, ${RUNS} runs each (p99 of ${RUNS} is the largest); ${new Date().toISOString()}`);
    console.log(`uptime before: ${uptimeBefore}`);
    console.log(`load average at the first run: ${load0}; after the last: ${load1}; uptime now: ${uptime()}`);
    row('kubectl (end to end), ms', 'p50', 'p99', 'kubectl CPU', 'server CPU');
    const of = (v: Variant, k: 'wall' | 'kubectl' | 'server') => times.get(v.name)!.map((x) => x[k]);
    for (const v of variants) row(v.name, ms(pct(of(v, 'wall'), 50)), ms(pct(of(v, 'wall'), 99)), ms(pct(of(v, 'kubectl'), 50)), ms(pct(of(v, 'server'), 50)));
    const pagesPerList = Math.ceil(PODS / CHUNK);
    row(`server, plain HTTPS client (${pagesPerList} pages of ${CHUNK}), ms`, 'p50', 'p99', '', 'server CPU');
    row(`  one page, JSON (GET /api/v1/pods?limit=${CHUNK})`, ms(pct(server.jsonPage, 50)), ms(pct(server.jsonPage, 99)));
    row('  the pages of the list summed, JSON', ms(pct(server.jsonList, 50)), ms(pct(server.jsonList, 99)));
    row('  one page, Table (what kubectl get asks)', ms(pct(server.tablePage, 50)), ms(pct(server.tablePage, 99)));
    row('  the pages of the list summed, Table', ms(pct(server.tableList, 50)), ms(pct(server.tableList, 99)), '', ms(pct(serverCpu.tableList, 50)));
    row('  one unchunked GET, Table', ms(pct(server.tableWhole, 50)), ms(pct(server.tableWhole, 99)), '', ms(pct(serverCpu.tableWhole, 50)));
    row('  one unchunked GET, JSON', ms(pct(server.jsonWhole, 50)), ms(pct(server.jsonWhole, 99)));
    const chunked = of(variants[1]!, 'wall');
    const unchunked = of(variants[2]!, 'wall');
    row('ratio: get pods -A chunked / --chunk-size=0', (pct(chunked, 50) / pct(unchunked, 50)).toFixed(2), (pct(chunked, 99) / pct(unchunked, 99)).toFixed(2));
    // Pages past the burst of 10 start no sooner than 200 ms apart (5 a second), the first page at 0.
    const floor = Math.max(0, pagesPerList - 10) * 200;
    console.log(`kubectl get pods -A -v=6: ${thr.gets} GETs of pods, ${thr.waits} "client-side throttling" waits logged, ${ms(thr.waited)} in all (rate limiter QPS 5 / burst 10: the last page starts no sooner than ${ms(floor)} after the first)`);
    console.log(`kubectl get pods -A --chunk-size=0 -v=6: ${thr0.gets} GET(s) of pods, ${thr0.waits} waits logged, ${ms(thr0.waited)}`);
    console.log(`target kubectl get pods -A under 2 s p99: ${pct(chunked, 99) < 2000 ? 'met' : 'NOT met'} chunked (default), ${pct(unchunked, 99) < 2000 ? 'met' : 'NOT met'} with --chunk-size=0`);
  } finally {
    await api?.stop();
    for (const fn of cleanups.reverse()) {
      try {
        await fn();
      } catch {
        // cleanup goes on
      }
    }
  }
}

await main();
