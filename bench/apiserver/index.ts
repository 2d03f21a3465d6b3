/**
 * API server benchmark (issue 4, "Performance"): a real API server process (HTTPS, SQLite) on its
 * own core, driven from this process over keep-alive connections:
 *
 * 1. `GET` of one pod: requests per second (BENCH_GET_CONCURRENCY, 50, concurrent connections);
 * 2. `LIST` of 1 000 pods (JSON, and as the Table kubectl asks for): requests per second;
 *    and `kubectl get pods -A` of BENCH_LIST_PODS (10 000) pods as kubectl pages it (Tables of 500,
 *    `/api/v1/pods?limit=500` then `continue`), p50 and p99 of the whole list;
 * 3. watch fan-out: 100 watchers on pods; for each write (a label patch), the time from sending the
 *    write to each watcher's receipt of its event: p50 and p99 over all deliveries (SQLite; the
 *    in-memory store; the in-memory store with watchers that ask for Tables, as `kubectl get -w`);
 *
 * and the same operations on raw SQLite (better-sqlite3, same schema, JSON rows) in this process,
 * in the same run: a keyed read and a read of 1 000 rows copied into an answer's JSON text (what
 * the server does with them), and a write (fsynced) delivered to 100 in-process listeners. The
 * ratio is the cost of HTTPS, routing, authentication and the API's rules on top of the store. Prints figures and ratios; asserts nothing about time.
 * Targets: 2 000 gets/s on one core; a write reaching 100 watchers in under 10 ms at p99.
 * Run: `node bench/apiserver/index.ts` (or `npm run bench apiserver`). With `--compare DIR` the
 * server figures are measured on the tree at DIR too (e.g. a worktree of main, built), in the same
 * run, the two trees alternating operation by operation, and printed side by side with their ratio.
 *
 * `--node-index` runs only the kubelets' view instead (issue 20, the watch cache's spec.nodeName
 * index): BENCH_NODE_PODS (10 000) pods on BENCH_NODES (100) nodes in the in-memory store, one
 * watcher per node (`fieldSelector=spec.nodeName=<node>`, as each kubelet), each write (a label
 * patch) delivered to its node's watcher: p50/p99 from sending to receipt; and lists by node
 * (`/api/v1/pods?fieldSelector=spec.nodeName=<node>`, 4 concurrent) per second. With `--compare`.
 *
 * `--apiservers N` (N >= 2) measures instead GETs of one pod on BENCH_GET_CONCURRENCY (50) connections
 * against 1 and N API server processes on one etcd, started as `kube32-cli up --apiservers N` starts
 * them (`--reuse-port` on one port, each with a `--peer-advertise-port`): 1 is the first process's peer
 * port, N the shared port, alternating over BENCH_ROUNDS (2) rounds in one run, driven by the Node.js
 * client of this file and, when Debian's `wrk` is installed, by `wrk -t2 -c50` (C, with the admin's
 * bearer token) for BENCH_WRK_SECONDS (8) each; ratios N/1 and the load average are printed.
 */
import { EventEmitter } from 'node:events';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:https';
import { type Call, caller, callOn, pct, pool } from '../helpers.ts';
import { execFileSync } from 'node:child_process';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { startEtcd } from '../../test/apiserver-etcd/etcd-server.ts';
import { startApiServer } from '../../test/helpers/apiserver.ts';

const PODS = Number(process.env.BENCH_PODS ?? 1000);
const GETS = Number(process.env.BENCH_GETS ?? 20000);
const LISTS = Number(process.env.BENCH_LISTS ?? 100);
const WATCHERS = Number(process.env.BENCH_WATCHERS ?? 100);
const WRITES = Number(process.env.BENCH_WRITES ?? 200);
const GET_CONCURRENCY = Number(process.env.BENCH_GET_CONCURRENCY ?? 50);
const LIST_PODS = Number(process.env.BENCH_LIST_PODS ?? 10_000);
const PAGED_LISTS = Number(process.env.BENCH_PAGED_LISTS ?? 10);
const TABLE = 'application/json;as=Table;v=v1;g=meta.k8s.io,application/json';
const NODE_PODS = Number(process.env.BENCH_NODE_PODS ?? 10_000);
const NODES = Number(process.env.BENCH_NODES ?? 100);
const NODE_LISTS = Number(process.env.BENCH_NODE_LISTS ?? 1000);
const compareAt = process.argv.indexOf('--compare');
const compareRoot = compareAt >= 0 ? process.argv[compareAt + 1] : undefined;
if (compareAt >= 0 && !compareRoot) throw new Error('--compare needs the directory of the other tree');

type Api = Awaited<ReturnType<typeof startApiServer>>;

const podBody = (i: number) => ({
  metadata: { name: `pod-${i}`, labels: { app: 'bench', i: String(i) } },
  spec: { nodeName: 'node-1', containers: [{ name: 'c', image: 'wasm-free:1', ports: [{ containerPort: 8080 }] }] },
});


let markSeq = 0;

/**
 * Opens WATCHERS watches on the pods of `target`, then makes WRITES label patches one after the
 * other; answers, in ms, each delivery's time from the write's sending, and each write's answer time.
 */
async function fanOut(target: Awaited<ReturnType<typeof startApiServer>>, doCall: Call, pods = PODS, accept = 'application/json', byNode?: number): Promise<{ deliveries: number[]; answered: number[] }> {
  const turl = new URL(target.url);
  const ttoken = target.kubeConfig.getCurrentUser()!.token!;
  const rv = JSON.parse((await doCall('GET', '/api/v1/namespaces/default/pods?limit=1')).text).metadata.resourceVersion as string;
  const sentAt = new Map<string, number>();
  const deliveries: number[] = [];
  let pending = 0;
  let onDone: (() => void) | undefined;
  const watchAgent = new Agent({ keepAlive: true, maxSockets: WATCHERS + 1, ca: Buffer.from(target.kubeConfig.getCurrentCluster()!.caData!, 'base64') });
  const watchers = await Promise.all(
    Array.from(
      { length: byNode ?? WATCHERS },
      (_, k) =>
        new Promise<import('node:http').ClientRequest>((resolve, reject) => {
          const path = byNode === undefined ? `/api/v1/namespaces/default/pods?watch=true&resourceVersion=${rv}` : `/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dnode-${k}&resourceVersion=${rv}`;
          const req = request({ host: turl.hostname, port: turl.port, path, agent: watchAgent, headers: { Authorization: `Bearer ${ttoken}`, Accept: accept } }, (res) => {
            let buf = '';
            res.setEncoding('utf8');
            res.on('data', (d: string) => {
              const now = performance.now();
              buf += d;
              let nl = buf.indexOf('\n');
              while (nl >= 0) {
                const line = buf.slice(0, nl);
                buf = buf.slice(nl + 1);
                nl = buf.indexOf('\n');
                if (!line.trim()) continue;
                // The mark is found without parsing the whole event, to keep this process's share of the CPU small.
                const mark = /"mark":"(m\d+)"/.exec(line)?.[1];
                const t0 = mark ? sentAt.get(mark) : undefined;
                if (t0 !== undefined) {
                  deliveries.push(now - t0);
                  if (--pending === 0) onDone?.();
                }
              }
            });
            resolve(req);
          });
          req.on('error', reject);
          req.end();
        }),
    ),
  );
  const answered: number[] = [];
  for (let w = 0; w < WRITES; w++) {
    // Unique across calls: a patch to the label's current value would change nothing and send no event.
    const mark = `m${markSeq++}`;
    // By node: pod-w is on node-(w % nodes), whose one watcher gets it.
    pending = byNode === undefined ? WATCHERS : 1;
    const done = new Promise<void>((r) => {
      onDone = r;
    });
    const t0 = performance.now();
    sentAt.set(mark, t0);
    const r = await doCall('PATCH', `/api/v1/namespaces/default/pods/pod-${w % pods}`, { metadata: { labels: { mark } } }, 'application/merge-patch+json');
    answered.push(performance.now() - t0);
    if (r.status !== 200) throw new Error(`patch: ${r.status} ${r.text}`);
    await done;
}
for (const wr of watchers) wr.destroy();
watchAgent.destroy();

  return { deliveries, answered };
}

/**
 * The kubelets' view (`--node-index`): NODE_PODS pods on NODES nodes, lists by node per second and a
 * write's delivery to its node's watcher, each tree in turn (ms, /s).
 */
async function nodeIndex(roots: (string | undefined)[]): Promise<{ name: string; listRps: number; fan: { deliveries: number[]; answered: number[] } }[]> {
  const servers: { name: string; api: Api; call: Call; agent: Agent }[] = [];
  try {
    for (const root of roots) {
      const api = await startApiServer(undefined, { args: ['--storage', 'memory'], env: { LOG_LEVEL: 'warn' }, root });
      const { call, agent } = caller(api);
      servers.push({ name: root ?? 'this tree', api, call, agent });
      const t = await pool(NODE_PODS, 16, async (i) => {
        const body = podBody(i);
        body.spec.nodeName = `node-${i % NODES}`;
        const r = await call('POST', '/api/v1/namespaces/default/pods', body);
        if (r.status !== 201) throw new Error(`create pod-${i}: ${r.status} ${r.text}`);
      });
      console.log(`${root ?? 'this tree'}: created ${NODE_PODS} pods on ${NODES} nodes in ${t.toFixed(2)} s`);
    }
    const out = servers.map((s) => ({ name: s.name, listRps: 0, fan: { deliveries: [] as number[], answered: [] as number[] } }));
    for (let round = 0; round < 2; round++) {
      for (const [i, s] of servers.entries()) {
        const secs = await pool(NODE_LISTS / 2, 4, async (j) => {
          const r = await s.call('GET', `/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-${j % NODES}`);
          if (r.status !== 200 || (JSON.parse(r.text) as { items: unknown[] }).items.length !== Math.ceil((NODE_PODS - (j % NODES)) / NODES)) throw new Error(`list by node: ${r.status}`);
        });
        out[i]!.listRps += NODE_LISTS / 2 / secs / 2;
      }
      for (const [i, s] of servers.entries()) {
        const f = await fanOut(s.api, s.call, NODE_PODS, 'application/json', NODES);
        out[i]!.fan.deliveries.push(...f.deliveries);
        out[i]!.fan.answered.push(...f.answered);
      }
    }
    return out;
  } finally {
    for (const s of servers) {
      s.agent.destroy();
      await s.api.stop();
    }
  }
}

if (process.argv.includes('--node-index')) {
  const res = await nodeIndex([undefined, ...(compareRoot ? [compareRoot] : [])]);
  const row = (what: string, ...cells: string[]) => console.log(`${what.padEnd(44)} ${cells.map((c) => c.padStart(14)).join(' ')}`);
  console.log();
  row(`${NODE_PODS} pods on ${NODES} nodes (memory)`, ...res.map((r) => r.name.slice(-14)), ...(res.length > 1 ? ['this/other'] : []));
  const line = (what: string, f: (r: (typeof res)[number]) => number, unit: string, digits: number) => row(what, ...res.map((r) => `${f(r).toFixed(digits)} ${unit}`), ...(res.length > 1 ? [(f(res[0]!) / f(res[1]!)).toFixed(3)] : []));
  line('list by node (4 concurrent)', (r) => r.listRps, '/s', 0);
  line(`write → its node's watcher (of ${NODES}), p50`, (r) => pct(r.fan.deliveries, 50), 'ms', 2);
  line(`write → its node's watcher (of ${NODES}), p99`, (r) => pct(r.fan.deliveries, 99), 'ms', 2);
  line('  the write answered, p99', (r) => pct(r.fan.answered, 99), 'ms', 2);
  process.exit(0);
}

/** `wrk`'s requests per second of GETs of `url` on 50 connections (2 threads) for `seconds`, with a bearer token. */
function wrkRps(url: string, token: string, seconds: number): number {
  const out = execFileSync('wrk', ['-t2', `-c${GET_CONCURRENCY}`, `-d${seconds}s`, '-H', `Authorization: Bearer ${token}`, '-H', 'Accept: application/json', url], { encoding: 'utf8' });
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out);
  if (non2xx) throw new Error(`wrk: ${non2xx[1]} answers were not 200:\n${out}`);
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(out);
  if (!rps) throw new Error(`wrk printed no Requests/sec:\n${out}`);
  return Number(rps[1]);
}

/**
 * `--apiservers N`: GET of one pod against the first process alone (its peer port) and against the N
 * processes sharing one port, alternating; answers the mean requests per second of each, by client.
 */
async function apiserversBench(n: number): Promise<void> {
  const cleanups: (() => unknown)[] = [];
  const servers: Api[] = [];
  try {
    const etcd = await startEtcd({ after: (fn) => cleanups.push(fn) });
    const etcdArgs = ['--storage', 'etcd', '--etcd-endpoints', etcd.url, '--reuse-port', '--peer-advertise-port', '0'];
    const first = await startApiServer(undefined, { args: etcdArgs, env: { LOG_LEVEL: 'warn' } });
    servers.push(first);
    // The others on the first one's port (a later --port wins over the helper's --port 0).
    for (let i = 1; i < n; i++) servers.push(await startApiServer(undefined, { args: [...etcdArgs, '--port', String(first.port)], env: { LOG_LEVEL: 'warn' } }));
    if (first.peerPort === undefined) throw new Error('the API server printed no peerPort');
    const { call, agent } = caller(first);
    const tCreate = await pool(PODS, 16, async (i) => {
      const r = await call('POST', '/api/v1/namespaces/default/pods', podBody(i));
      if (r.status !== 201) throw new Error(`create pod-${i}: ${r.status} ${r.text}`);
    });
    agent.destroy();
    console.log(`created ${PODS} pods on etcd in ${tCreate.toFixed(2)} s; ${n} API server processes on port ${first.port}, the first alone on ${first.peerPort}`);
    const token = first.kubeConfig.getCurrentUser()!.token!;
    const ca = Buffer.from(first.kubeConfig.getCurrentCluster()!.caData!, 'base64');
    const targets = [
      { name: '1 process', url: new URL(`https://127.0.0.1:${first.peerPort}`) },
      { name: `${n} processes`, url: new URL(first.url) },
    ];
    const hasWrk = existsSync('/usr/bin/wrk');
    const rounds = Number(process.env.BENCH_ROUNDS ?? 2);
    const wrkSeconds = Number(process.env.BENCH_WRK_SECONDS ?? 8);
    const node = targets.map(() => [] as number[]);
    const wrk = targets.map(() => [] as number[]);
    const load0 = loadavg();
    for (let round = 0; round < rounds; round++) {
      for (const [k, t] of targets.entries()) {
        // A new agent per measure: its 50 connections are spread among the listeners afresh.
        const a = new Agent({ keepAlive: true, maxSockets: 64, ca });
        const get = (i: number) => callOn(t.url, token, a, 'GET', `/api/v1/namespaces/default/pods/pod-${i % PODS}`, undefined, undefined, undefined, false);
        await pool(500, GET_CONCURRENCY, async (i) => void (await get(i)));
        const secs = await pool(GETS, GET_CONCURRENCY, async (i) => {
          const r = await get(i);
          if (r.status !== 200) throw new Error(`get: ${r.status}`);
        });
        a.destroy();
        node[k]!.push(GETS / secs);
        if (hasWrk) wrk[k]!.push(wrkRps(`${t.url.origin}/api/v1/namespaces/default/pods/pod-0`, token, wrkSeconds));
        console.log(`round ${round + 1}, ${t.name}: node client ${node[k]!.at(-1)!.toFixed(0)} /s${hasWrk ? `, wrk ${wrk[k]!.at(-1)!.toFixed(0)} /s` : ''}`);
      }
    }
    const load1 = loadavg();
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const row = (what: string, ...cells: string[]) => console.log(`${what.padEnd(40)} ${cells.map((c) => c.padStart(14)).join(' ')}`);
    console.log();
    row(`get pod, ${GET_CONCURRENCY} connections, etcd`, '1 process', `${n} processes`, `${n}/1`);
    row('  Node.js client (this process)', `${mean(node[0]!).toFixed(0)} /s`, `${mean(node[1]!).toFixed(0)} /s`, (mean(node[1]!) / mean(node[0]!)).toFixed(2));
    if (hasWrk) row('  wrk -t2 -c50', `${mean(wrk[0]!).toFixed(0)} /s`, `${mean(wrk[1]!).toFixed(0)} /s`, (mean(wrk[1]!) / mean(wrk[0]!)).toFixed(2));
    else console.log('  (wrk is not installed: apt-get install wrk for the C client figure)');
    console.log(`load average before ${load0.map((l) => l.toFixed(2)).join(' ')}, after ${load1.map((l) => l.toFixed(2)).join(' ')}; ${rounds} rounds alternating`);
  } finally {
    for (const s of servers) await s.stop();
    for (const fn of cleanups.reverse()) await fn();
  }
}

const apiserversAt = process.argv.indexOf('--apiservers');
if (apiserversAt >= 0) {
  const n = Number(process.argv[apiserversAt + 1]);
  if (!Number.isInteger(n) || n < 2) throw new Error(`--apiservers needs a whole number of at least 2: current value is ${process.argv[apiserversAt + 1]}`);
  await apiserversBench(n);
  process.exit(0);
}

/** The figures of one tree's server. */
interface Figures {
  getRps: number;
  listRps: number;
  tableRps: number;
  pagedP50: number;
  pagedP99: number;
  fan: { deliveries: number[]; answered: number[] };
  memFan: { deliveries: number[]; answered: number[] };
  tableFan: { deliveries: number[]; answered: number[] };
}

/** One tree's servers (SQLite, and memory for the fan-out without the disk), started and set up. */
interface Target {
  name: string;
  api: Api;
  call: Call;
  agent: Agent;
  mem: Api;
  memCall: Call;
  memAgent: Agent;
}

async function setUp(name: string, root?: string): Promise<Target> {
  const api = await startApiServer(undefined, { env: { LOG_LEVEL: 'warn' }, root });
  const { call, agent } = caller(api);
  const tCreate = await pool(PODS, 16, async (i) => {
    const r = await call('POST', '/api/v1/namespaces/default/pods', podBody(i));
    if (r.status !== 201) throw new Error(`create pod-${i}: ${r.status} ${r.text}`);
  });
  console.log(`${name}: created ${PODS} pods in ${tCreate.toFixed(2)} s (${(PODS / tCreate).toFixed(0)} creates/s)`);
  // The pods of the paged list, in namespace "many" (10 000 with the 1 000 above: kubectl get pods -A lists all).
  const many = LIST_PODS - PODS;
  if (many > 0) {
    await call('POST', '/api/v1/namespaces', { metadata: { name: 'many' } });
    const t = await pool(many, 16, async (i) => {
      const r = await call('POST', '/api/v1/namespaces/many/pods', podBody(i));
      if (r.status !== 201) throw new Error(`create many/pod-${i}: ${r.status} ${r.text}`);
    });
    console.log(`${name}: created ${many} more pods in ${t.toFixed(2)} s`);
  }
  const mem = await startApiServer(undefined, { args: ['--storage', 'memory'], env: { LOG_LEVEL: 'warn' }, root });
  const m = caller(mem);
  for (let i = 0; i < 10; i++) await m.call('POST', '/api/v1/namespaces/default/pods', podBody(i));
  return { name, api, call, agent, mem, memCall: m.call, memAgent: m.agent };
}

/** `kubectl get pods -A` as kubectl asks: Tables of 500, page after page; answers the whole list's time, ms. */
async function pagedList(call: Call): Promise<number> {
  const t0 = performance.now();
  let token = '';
  let rows = 0;
  do {
    const r = await call('GET', `/api/v1/pods?limit=500${token ? `&continue=${encodeURIComponent(token)}` : ''}`, undefined, 'application/json', TABLE);
    if (r.status !== 200) throw new Error(`paged list: ${r.status} ${r.text.slice(0, 200)}`);
    const page = JSON.parse(r.text) as { rows: unknown[]; metadata: { continue?: string } };
    rows += page.rows.length;
    token = page.metadata.continue ?? '';
  } while (token);
  if (rows < LIST_PODS) throw new Error(`paged list: ${rows} rows of ${LIST_PODS}`);
  return performance.now() - t0;
}

/** Each operation on every target in turn (so that the machine's load falls on all alike). */
async function measure(targets: Target[]): Promise<Map<string, Figures>> {
  const out = new Map<string, Partial<Figures>>(targets.map((t) => [t.name, {}]));
  const fig = (t: Target) => out.get(t.name)!;
  for (const t of targets) await pool(500, GET_CONCURRENCY, async (i) => void (await t.call('GET', `/api/v1/namespaces/default/pods/pod-${i % PODS}`)));
  // 1. GET one pod.
  for (const t of targets) {
    const s = await pool(GETS, GET_CONCURRENCY, async (i) => {
      const r = await t.call('GET', `/api/v1/namespaces/default/pods/pod-${i % PODS}`, undefined, undefined, undefined, false);
      if (r.status !== 200) throw new Error(`get: ${r.status}`);
    });
    fig(t).getRps = GETS / s;
  }
  // 2. LIST 1 000 pods, JSON and Table; the paged list of all.
  for (const t of targets) {
    const s = await pool(LISTS, 4, async () => {
      const r = await t.call('GET', '/api/v1/namespaces/default/pods');
      if (r.status !== 200) throw new Error(`list: ${r.status}`);
    });
    fig(t).listRps = LISTS / s;
  }
  for (const t of targets) {
    const s = await pool(LISTS, 4, async () => {
      const r = await t.call('GET', '/api/v1/namespaces/default/pods?limit=500', undefined, 'application/json', TABLE);
      if (r.status !== 200) throw new Error(`table: ${r.status}`);
    });
    fig(t).tableRps = LISTS / s;
  }
  const paged = new Map<string, number[]>(targets.map((t) => [t.name, []]));
  for (let i = 0; i < PAGED_LISTS; i++) for (const t of targets) paged.get(t.name)!.push(await pagedList(t.call));
  for (const t of targets) {
    fig(t).pagedP50 = pct(paged.get(t.name)!, 50);
    fig(t).pagedP99 = pct(paged.get(t.name)!, 99);
  }
  // 3. Watch fan-out to 100 watchers (SQLite: each write is fsynced before it is delivered); memory; Table watchers.
  for (const t of targets) fig(t).fan = await fanOut(t.api, t.call);
  for (const t of targets) fig(t).memFan = await fanOut(t.mem, t.memCall, 10);
  for (const t of targets) fig(t).tableFan = await fanOut(t.mem, t.memCall, 10, TABLE);
  return out as Map<string, Figures>;
}

const targets: Target[] = [];
try {
  targets.push(await setUp('this tree'));
  if (compareRoot) targets.push(await setUp(compareRoot, compareRoot));
  const figures = await measure(targets);
  const ours = figures.get('this tree')!;
  const call = targets[0]!.call;
  const getRps = ours.getRps;
  const listRps = ours.listRps;
  const tableRps = ours.tableRps;
  const fan = ours.fan;
  const memFan = ours.memFan;
  const tableFan = ours.tableFan;

  // The same on raw SQLite, in this process.
  const dir = mkdtempSync(join(tmpdir(), 'bench-sqlite-'));
  const db = new Database(join(dir, 'raw.db'));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec('CREATE TABLE objects (resource TEXT, namespace TEXT, name TEXT, value TEXT, PRIMARY KEY (resource, namespace, name)) WITHOUT ROWID');
  const put = db.prepare('INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?)');
  const get = db.prepare('SELECT value FROM objects WHERE resource = ? AND namespace = ? AND name = ?').pluck();
  const list = db.prepare('SELECT value FROM objects WHERE resource = ? AND namespace = ? ORDER BY name').pluck();
  const stored = JSON.parse((await call('GET', '/api/v1/namespaces/default/pods/pod-0')).text) as Record<string, unknown>;
  db.transaction(() => {
    for (let i = 0; i < PODS; i++) put.run('pods', 'default', `pod-${i}`, JSON.stringify({ ...stored, metadata: { ...(stored.metadata as object), name: `pod-${i}` } }));
  })();
  let t = performance.now();
  // The raw operations do what the server does with the rows: copy the stored JSON text into the answer.
  let sink = 0;
  for (let i = 0; i < GETS; i++) sink += `{"apiVersion":"v1","kind":"Pod",${(get.get('pods', 'default', `pod-${i % PODS}`) as string).slice(1)}`.length;
  const rawGetRps = GETS / ((performance.now() - t) / 1000);
  t = performance.now();
  for (let i = 0; i < LISTS; i++) sink += `{"items":[${(list.all('pods', 'default') as string[]).map((r) => `{"apiVersion":"v1","kind":"Pod",${r.slice(1)}`).join(',')}]}`.length;
  const rawListRps = LISTS / ((performance.now() - t) / 1000);
  const bus = new EventEmitter();
  bus.setMaxListeners(WATCHERS + 1);
  const rawDeliveries: number[] = [];
  let rawT0 = 0;
  for (let i = 0; i < WATCHERS; i++) bus.on('e', (s: string) => {
    JSON.parse(s);
    rawDeliveries.push(performance.now() - rawT0);
  });
  const rawWrites: number[] = [];
  for (let w = 0; w < WRITES; w++) {
    rawT0 = performance.now();
    const json = JSON.stringify({ ...stored, metadata: { ...(stored.metadata as object), labels: { mark: `m${w}` } } });
    put.run('pods', 'default', `pod-${w % PODS}`, json);
    rawWrites.push(performance.now() - rawT0);
    bus.emit('e', json);
  }
  db.close();
  if (sink === 0) console.log('(nothing read)');
  rmSync(dir, { recursive: true, force: true });

  const row = (what: string, server: string, raw: string, ratio: string) => console.log(`${what.padEnd(34)} ${server.padStart(16)} ${raw.padStart(16)} ${ratio.padStart(12)}`);
  console.log();
  row('operation', 'API server', 'raw SQLite', 'server/raw');
  row(`get pod (${GET_CONCURRENCY} concurrent)`, `${getRps.toFixed(0)} /s`, `${rawGetRps.toFixed(0)} /s`, (getRps / rawGetRps).toFixed(3));
  row(`list ${PODS} pods, JSON`, `${listRps.toFixed(1)} /s`, `${rawListRps.toFixed(1)} /s`, (listRps / rawListRps).toFixed(3));
  row(`list ${PODS} pods, Table (limit 500)`, `${tableRps.toFixed(1)} /s`, '', '');
  row(`write (fsync) → ${WATCHERS} watchers, p50`, `${pct(fan.deliveries, 50).toFixed(2)} ms`, `${pct(rawDeliveries, 50).toFixed(3)} ms`, (pct(fan.deliveries, 50) / pct(rawDeliveries, 50)).toFixed(2));
  row(`write (fsync) → ${WATCHERS} watchers, p99`, `${pct(fan.deliveries, 99).toFixed(2)} ms`, `${pct(rawDeliveries, 99).toFixed(3)} ms`, (pct(fan.deliveries, 99) / pct(rawDeliveries, 99)).toFixed(2));
  row('  of which the write answered, p50/p99', `${pct(fan.answered, 50).toFixed(2)}/${pct(fan.answered, 99).toFixed(2)} ms`, `${pct(rawWrites, 50).toFixed(2)}/${pct(rawWrites, 99).toFixed(2)} ms`, '');
  row(`write (memory) → ${WATCHERS} watchers, p50`, `${pct(memFan.deliveries, 50).toFixed(2)} ms`, '', '');
  row(`write (memory) → ${WATCHERS} watchers, p99`, `${pct(memFan.deliveries, 99).toFixed(2)} ms`, '', '');
  row(`write (memory) → ${WATCHERS} Table watchers, p50`, `${pct(tableFan.deliveries, 50).toFixed(2)} ms`, '', '');
  row(`write (memory) → ${WATCHERS} Table watchers, p99`, `${pct(tableFan.deliveries, 99).toFixed(2)} ms`, '', '');
  row(`kubectl get pods -A, ${LIST_PODS} pods, p50`, `${ours.pagedP50.toFixed(0)} ms`, '', '');
  row(`kubectl get pods -A, ${LIST_PODS} pods, p99`, `${ours.pagedP99.toFixed(0)} ms`, '', '');
  if (compareRoot) {
    const other = figures.get(compareRoot)!;
    console.log();
    console.log(`this tree beside ${compareRoot}, same run (operations alternating):`);
    row('operation', 'this tree', 'other tree', 'this/other');
    const cmpRow = (what: string, a: number, b: number, unit: string, digits = 1) => row(what, `${a.toFixed(digits)} ${unit}`, `${b.toFixed(digits)} ${unit}`, (a / b).toFixed(3));
    cmpRow(`get pod (${GET_CONCURRENCY} concurrent)`, ours.getRps, other.getRps, '/s', 0);
    cmpRow(`list ${PODS} pods, JSON`, ours.listRps, other.listRps, '/s');
    cmpRow(`list ${PODS} pods, Table (limit 500)`, ours.tableRps, other.tableRps, '/s');
    cmpRow(`kubectl get pods -A (${LIST_PODS}), p50`, ours.pagedP50, other.pagedP50, 'ms', 0);
    cmpRow(`kubectl get pods -A (${LIST_PODS}), p99`, ours.pagedP99, other.pagedP99, 'ms', 0);
    for (const [label, k] of [['write (fsync)', 'fan'], ['write (memory)', 'memFan'], ['write (memory), Table', 'tableFan']] as const) {
      cmpRow(`${label} → ${WATCHERS} watchers, p50`, pct(ours[k].deliveries, 50), pct(other[k].deliveries, 50), 'ms', 2);
      cmpRow(`${label} → ${WATCHERS} watchers, p99`, pct(ours[k].deliveries, 99), pct(other[k].deliveries, 99), 'ms', 2);
    }
  }
  console.log();
  console.log(`targets: >= 10000 gets/s on ${GET_CONCURRENCY} connections: ${getRps >= 10_000 ? 'met' : 'NOT met'}; kubectl get pods -A < 2 s p99: ${ours.pagedP99 < 2000 ? 'met' : 'NOT met'}; >= 2000 gets/s on one core: ${getRps >= 2000 ? 'met' : 'NOT met'}; p99 write → ${WATCHERS} watchers < 10 ms: ${pct(fan.deliveries, 99) < 10 ? 'met' : 'NOT met'} with fsync, ${pct(memFan.deliveries, 99) < 10 ? 'met' : 'NOT met'} without the disk`);
} finally {
  for (const t of targets) {
    t.agent.destroy();
    t.memAgent.destroy();
    await t.api.stop();
    await t.mem.stop();
  }
}
