/**
 * End to end (issue 26, "No failed requests"): a real API server, the controllers and real kube32-sim
 * workers. A counter pod moves 10 times under a steady stream of requests through its Service (the API
 * server's service proxy) and at the address it had when the stream began; no request fails, and every
 * answered count is distinct and accounted for (no request ran twice, none ran unanswered). Then the
 * bounds: a request to a frozen pod is held and answered once the pod thaws, a call in flight at the
 * freeze finishes first, and past the hold's time or count the answer is 503 with Retry-After: 1.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { type TestContext, test } from 'node:test';
import type { Checkpoint } from '../../src/api/index.ts';
import { type Count, counterPod, runPod, startControllersCluster } from './cluster.ts';

/** One GET with its own keep-alive agent's connection; never rejects (a failure is status 0). */
function get(agent: http.Agent, host: string, port: number, path: string, headers: Record<string, string> = {}): Promise<Reply & { headers: http.IncomingHttpHeaders }> {
  return new Promise((resolve) => {
    const req = http.get({ host, port, path, agent, headers, timeout: 30_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        body += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
      res.on('error', (err) => resolve({ status: 0, body, headers: {}, error: err.message }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => resolve({ status: 0, body: '', headers: {}, error: err.message }));
  });
}

type Reply = { status: number; body: string; error?: string };

/**
 * Steady streams of counter requests, one each 20 ms per stream (a pace, not a synchronisation), until
 * `stop()`, which waits for the requests in flight and answers the failed ones (`where: status body`),
 * the counts answered and how many.
 */
function steadyStreams(sources: Array<[where: string, once: () => Promise<Reply>]>): { add(where: string, once: () => Promise<Reply>): void; stop(): Promise<{ failures: string[]; counts: number[]; answered: number }> } {
  const failures: string[] = [];
  const counts: number[] = [];
  let answered = 0;
  let stopped = false;
  const inflight = new Set<Promise<void>>();
  const loops: Promise<void>[] = [];
  const record = (where: string, r: Reply): void => {
    if (r.status !== 200) {
      failures.push(`${where}: ${r.status} ${r.error ?? r.body.slice(0, 200)}`);
      return;
    }
    answered++;
    counts.push((JSON.parse(r.body) as Count).count);
  };
  const add = (where: string, once: () => Promise<Reply>): void => {
    loops.push((async () => {
      while (!stopped) {
        const p = once().then((r) => record(where, r));
        inflight.add(p);
        void p.finally(() => inflight.delete(p));
        await new Promise((r) => setTimeout(r, 20)); // the stream's pace, not a synchronisation
      }
    })());
  };
  for (const [where, once] of sources) add(where, once);
  return {
    add,
    async stop() {
      stopped = true;
      await Promise.all(loops);
      await Promise.all([...inflight]);
      return { failures, counts, answered };
    },
  };
}

/**
 * A counter moved 10 times under two steady streams (its Service, its first address): no request fails,
 * each runs once.
 * @param push the controllers' `pushSnapshotsToTarget` (the snapshot pushed to the target while it is stored)
 */
async function movesUnderStream(t: TestContext, push: boolean): Promise<void> {
  const c = await startControllersCluster(t, {}, { pushSnapshotsToTarget: push });
  await c.startWorker('w1');
  await c.startWorker('w2');
  const port = 18280;
  const pod = await runPod(c, counterPod('steady', port, { nodeName: 'w1', labels: { app: 'steady' } }));
  await c.rest.json({
    method: 'POST', path: '/api/v1/namespaces/default/services',
    body: { apiVersion: 'v1', kind: 'Service', metadata: { name: 'steady' }, spec: { selector: { app: 'steady' }, ports: [{ name: 'http', port: 80, targetPort: port }] } },
  });
  const viaService = async (path = '/count'): Promise<Reply> => {
    try {
      const r = await c.rest.request({ method: 'GET', path: `/api/v1/namespaces/default/services/steady:http/proxy${path}` });
      let body = '';
      for await (const chunk of r.body) body += Buffer.from(chunk as Uint8Array).toString();
      return { status: r.status, body };
    } catch (err: unknown) {
      return { status: 0, body: '', error: String(err) };
    }
  };
  const base = await c.until('the Service to answer', async () => {
    const r = await viaService('/view');
    return r.status === 200 ? (JSON.parse(r.body) as Count).count : undefined;
  }, 30_000);

  // The address the client holds: the pod's when the stream began (the moves alternate w1, w2, w1...).
  const address = pod.status!.podIP!;
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  t.after(() => agent.destroy());
  // Two steady streams, 50 requests a second each.
  const streams = steadyStreams([['service', () => viaService()], ['address', () => get(agent, address, port, '/count')]]);

  const moves = 10;
  for (let i = 0; i < moves; i++) {
    const name = `steady-m${i}`;
    await c.createCheckpoint({ metadata: { name }, spec: { podName: 'steady', action: 'Move' } });
    const ck = await c.until(`move ${name}`, async () => {
      const k = await c.getCheckpoint(name);
      return k?.status?.phase === 'Completed' || k?.status?.phase === 'Failed' ? k : undefined;
    }, 60_000);
    assert.equal((ck as Checkpoint).status?.phase, 'Completed', (ck as Checkpoint).status?.message ?? '');
    await c.until('the moved pod settled', async () => {
      const p = await c.getPod('steady');
      return p?.status?.phase === 'Running' && !p.metadata?.annotations?.['kube32.io/restore-from'];
    });
  }
  const { failures, counts, answered } = await streams.stop();

  assert.deepEqual(failures, [], `${failures.length} of ${failures.length + answered} requests failed`);
  assert.ok(answered > moves * 4, `a steady stream through the moves (${answered} answered)`);
  // Each request ran once: every count distinct, and as many as the answers (none ran without an answer).
  const sorted = [...counts].sort((a, b) => a - b);
  assert.equal(new Set(sorted).size, sorted.length, 'no count answered twice');
  const last = JSON.parse((await viaService('/view')).body) as Count;
  assert.equal(last.count - base, answered, 'the pod counted exactly the answered requests');
  assert.deepEqual(sorted, Array.from({ length: answered }, (_, i) => base + 1 + i), 'the counts run on from the freeze, one by one');
}

test('a counter moved 10 times under a steady request stream, through its Service and at its address: no request fails, each runs once', { timeout: 300_000 }, (t) => movesUnderStream(t, false));

test('the same with the snapshot pushed to the target while it is stored (pushSnapshotsToTarget): no request fails, each runs once', { timeout: 300_000 }, (t) => movesUnderStream(t, true));

/** Moves the pod `name` to `node` and waits for its Checkpoint `ck` to end; asserts it Completed. */
async function moveTo(c: Awaited<ReturnType<typeof startControllersCluster>>, name: string, ck: string, node: string): Promise<void> {
  await c.createCheckpoint({ metadata: { name: ck }, spec: { podName: name, action: 'Move', target: { nodeName: node } } });
  const done = await c.until(`move ${ck}`, async () => {
    const k = await c.getCheckpoint(ck);
    return k?.status?.phase === 'Completed' || k?.status?.phase === 'Failed' ? k : undefined;
  }, 60_000);
  assert.equal(done.status?.phase, 'Completed', done.status?.message ?? '');
}

test('back-to-back moves between two nodes (each begun as the last completes) under streams at both old addresses: no request fails, none is forwarded to and fro', { timeout: 180_000 }, async (t) => {
  const c = await startControllersCluster(t);
  const w1 = await c.startWorker('w1');
  const w2 = await c.startWorker('w2');
  const port = 18282;
  await runPod(c, counterPod('bounce', port, { nodeName: 'w1' }));
  const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
  t.after(() => agent.destroy());
  const streams = steadyStreams([]);
  for (let i = 0; i < 3; i++) streams.add('w1', () => get(agent, w1.address, port, '/count'));
  await moveTo(c, 'bounce', 'bounce-m0', 'w2');
  // Both addresses are old ones now: the port of the node the pod left forwards while the pod moves on.
  for (let i = 0; i < 3; i++) streams.add('w2', () => get(agent, w2.address, port, '/count'));
  // Each move begins within a few ms of the last one's end: the forwarding nodes' last lookups of
  // where the pod runs (up to 250 ms old) point at each other.
  const moves = 6;
  for (let i = 1; i <= moves; i++) await moveTo(c, 'bounce', `bounce-m${i}`, i % 2 === 1 ? 'w1' : 'w2');
  const { failures, counts, answered } = await streams.stop();
  assert.deepEqual(failures, [], `${failures.length} of ${failures.length + answered} requests failed`);
  assert.ok(answered > moves * 2, `a steady stream through the moves (${answered} answered)`);
  assert.equal(new Set(counts).size, counts.length, 'no count answered twice');
});

test('a frozen pod: a call in flight finishes first, a request meanwhile is held and answered once it thaws; past the bounds 503 with Retry-After: 1', { timeout: 180_000 }, async (t) => {
  const c = await startControllersCluster(t);
  const w = await c.startWorker('w1', ['--hold-timeout', '1500ms', '--hold-requests', '3'], { LOG_LEVEL: 'debug' });
  const heldLines = () => w.logs().split('\n').filter((l) => l.includes('"msg":"request held"')).length;
  const port = 18281;
  await runPod(c, counterPod('frozen', port, { nodeName: 'w1' }));
  const agent = new http.Agent({ keepAlive: true });
  t.after(() => agent.destroy());
  const node = (path: string) => c.rest.request({ method: 'POST', path: `/api/v1/nodes/w1/proxy/${path}` });
  const before = JSON.parse((await get(agent, w.address, port, '/view')).body) as Count;

  // /spin runs 3 s of pod time: the freeze waits for it, and it answers 200.
  const requestLines = async () => {
    const r = await c.rest.request({ method: 'GET', path: '/api/v1/namespaces/default/pods/frozen/log' });
    let text = '';
    for await (const chunk of r.body) text += Buffer.from(chunk as Uint8Array).toString();
    return text.split('\n').filter((l) => l.includes('request')).length;
  };
  const logged = await requestLines();
  const spin = get(new http.Agent(), w.address, port, '/spin');
  // The pod logs "request" as the call begins: the spin is running.
  await c.until('the spin call to be running', async () => (await requestLines()) > logged);
  const frozen = await node('checkpoint/default/frozen/c?leave=frozen&timeoutMs=20000');
  for await (const _ of frozen.body) { /* the snapshot */ }
  assert.equal(frozen.status, 200);
  const spun = await spin;
  assert.equal(spun.status, 200, 'the call in flight at the freeze finished');

  // Held while frozen, answered after the thaw: it ran once, after the freeze.
  const seen = heldLines();
  const held = get(agent, w.address, port, '/count');
  await c.until('the request to be held', () => heldLines() > seen);
  const thaw = await node('thaw/default/frozen/c');
  for await (const _ of thaw.body) { /* {"thawed":true} */ }
  assert.equal(thaw.status, 200);
  const r = await held;
  assert.equal(r.status, 200, r.body);
  assert.equal((JSON.parse(r.body) as Count).count, before.count + 1, 'the held request ran once, after the freeze');

  // Past the time bound: 503 with Retry-After: 1.
  const again = await node('checkpoint/default/frozen/c?leave=frozen');
  for await (const _ of again.body) { /* the snapshot */ }
  const late = await get(agent, w.address, port, '/count');
  assert.equal(late.status, 503);
  assert.equal(late.headers['retry-after'], '1');
  assert.match(late.body, /held 1500 ms/);
  // Past the count bound (3 held): the fourth at once.
  const three = heldLines();
  const held3 = [0, 1, 2].map(() => get(new http.Agent(), w.address, port, '/view'));
  await c.until('three requests held', () => heldLines() >= three + 3);
  const fourth = await get(new http.Agent(), w.address, port, '/view');
  assert.equal(fourth.status, 503);
  assert.equal(fourth.headers['retry-after'], '1');
  assert.match(fourth.body, /3 requests/);
  const thaw2 = await node('thaw/default/frozen/c');
  for await (const _ of thaw2.body) { /* {"thawed":true} */ }
  assert.deepEqual((await Promise.all(held3)).map((x) => x.status), [200, 200, 200]);
  // The late request never ran: the count went on from the held one.
  assert.equal((JSON.parse((await get(agent, w.address, port, '/count')).body) as Count).count, before.count + 2);
});
