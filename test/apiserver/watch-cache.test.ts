// The watch cache (src/apiserver/storage/cacher.ts) through real clients: paged lists are one
// consistent snapshot, resourceVersion semantics as kube's, and a watcher that does not read is
// ended while the others keep getting every event.
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { test } from 'node:test';
import { CoreV1Api, EventsV1Api } from '@kubernetes/client-node';
import { rawRequest, startApiServer, type TestApiServer } from '../helpers/apiserver.ts';
import { waitFor } from '../helpers/wait.ts';

const call = (api: TestApiServer, method: string, path: string, body?: unknown, type = 'application/json') => rawRequest(api, method, path, body, { type });

/** Opens a raw watch; answers its response (not read: the caller decides) and request. */
function openWatch(api: TestApiServer, path: string): Promise<{ res: IncomingMessage; destroy: () => void }> {
  const ca = Buffer.from(api.kubeConfig.getCurrentCluster()!.caData!, 'base64');
  const u = new URL(api.url + path);
  return new Promise((resolve, reject) => {
    const req = httpsRequest({ host: u.hostname, port: u.port, path: u.pathname + u.search, ca, headers: { Authorization: `Bearer ${api.kubeConfig.getCurrentUser()!.token}` } }, (res) => resolve({ res, destroy: () => req.destroy() }));
    req.on('error', reject);
    req.end();
  });
}

/** Creates `names` in namespace `ns`, 16 at a time. */
async function createConfigMaps(core: CoreV1Api, ns: string, names: string[]): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < names.length) {
        const name = names[next++]!;
        await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name }, data: { v: '0' } } });
      }
    }),
  );
}

test('lists and gets from the watch cache', { timeout: 300_000 }, async (t) => {
  const api = await startApiServer(t);
  const core = api.kubeConfig.makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: 'paged' } } });
  const N = 2000;
  const names = Array.from({ length: N }, (_, i) => `cm-${String(i).padStart(5, '0')}`);
  await createConfigMaps(core, 'paged', names);

  await t.test('a paged list by client-node is the state of its first page, each object once, while objects are deleted, created and changed', async () => {
    const first = await core.listNamespacedConfigMap({ namespace: 'paged', limit: 300 });
    const rv0 = Number(first.metadata!.resourceVersion);
    assert.ok(first.metadata!._continue, 'a continue token');
    assert.equal(first.metadata!.remainingItemCount, N + 1 - 300, 'the 2000 and kube-root-ca.crt');
    // Between the pages: objects not yet listed deleted, changed, and new ones made among them.
    for (let i = 1500; i < 1600; i++) await core.deleteNamespacedConfigMap({ namespace: 'paged', name: names[i]! });
    for (let i = 1600; i < 1650; i++) await core.patchNamespacedConfigMap({ namespace: 'paged', name: names[i]!, body: [{ op: 'replace', path: '/data/v', value: 'changed' }] });
    await createConfigMaps(core, 'paged', Array.from({ length: 100 }, (_, i) => `cm-01500-new-${i}`));
    const items = [...first.items];
    let token: string | undefined = first.metadata!._continue;
    while (token) {
      const page = await core.listNamespacedConfigMap({ namespace: 'paged', limit: 300, _continue: token });
      assert.equal(page.metadata!.resourceVersion, String(rv0), 'every page at the first one’s version');
      items.push(...page.items);
      token = page.metadata!._continue;
    }
    const listed = items.map((c) => c.metadata!.name!);
    assert.equal(new Set(listed).size, listed.length, 'no object twice');
    assert.deepEqual(listed.filter((n) => n !== 'kube-root-ca.crt'), names, 'exactly the objects of the first page’s version, in order');
    assert.ok(items.every((c) => Number(c.metadata!.resourceVersion) <= rv0), 'no object newer than the list');
    assert.ok(items.filter((c) => c.metadata!.name! >= names[1600]! && c.metadata!.name! < names[1650]!).every((c) => c.data?.v === '0'), 'changed objects as they were');
    // A fresh list sees the changes.
    const now = await core.listNamespacedConfigMap({ namespace: 'paged' });
    assert.equal(now.items.length, N + 1);
    assert.ok(Number(now.metadata!.resourceVersion) > rv0);
    assert.equal(now.items.find((c) => c.metadata!.name === names[1600])!.data!.v, 'changed');
  });

  await t.test('kubectl get --chunk-size pages a list while a writer deletes and creates: each object once, never a deleted one beside its successor', async () => {
    // The writer deletes old-i then creates new-i: in any one state at most one of the two exists.
    const pairs = 400;
    await createConfigMaps(core, 'paged', Array.from({ length: pairs }, (_, i) => `a-old-${i}`));
    let written = 0;
    let stop = false;
    const writer = (async () => {
      for (let i = 0; i < pairs && !stop; i++) {
        await core.deleteNamespacedConfigMap({ namespace: 'paged', name: `a-old-${i}` });
        await core.createNamespacedConfigMap({ namespace: 'paged', body: { metadata: { name: `z-new-${i}` } } });
        written++;
      }
    })();
    // Started once the writer is under way, so that the pages are read while it writes.
    await waitFor('the writer under way', 60_000, () => written >= 5);
    const before = written;
    const r = await api.kubectl(['get', 'configmaps', '-n', 'paged', '--chunk-size=50', '-o', 'name'], { timeoutMs: 120_000 });
    const during = written - before;
    stop = true;
    await writer;
    assert.equal(r.code, 0, r.stderr);
    const listed = r.stdout.trim().split('\n').map((l) => l.replace('configmap/', ''));
    assert.equal(new Set(listed).size, listed.length, 'no object twice');
    for (let i = 0; i < pairs; i++) assert.ok(!(listed.includes(`a-old-${i}`) && listed.includes(`z-new-${i}`)), `a-old-${i} and z-new-${i} are never in one list`);
    const ofPairs = listed.filter((n) => n.startsWith('a-old-') || n.startsWith('z-new-')).length;
    assert.ok(ofPairs === pairs || ofPairs === pairs - 1, `one of each pair (one may be between its delete and its create): ${ofPairs} of ${pairs}`);
    assert.ok(during > 0, `the writer wrote while kubectl paged (${during} pairs)`);
  });

  await t.test('resourceVersion semantics: Exact reads an older state, NotOlderThan waits, a too-large one is 504, a too-old one 410', async () => {
    const cm = await core.createNamespacedConfigMap({ namespace: 'paged', body: { metadata: { name: 'versions' }, data: { v: '1' } } });
    const rv1 = cm.metadata!.resourceVersion!;
    await core.patchNamespacedConfigMap({ namespace: 'paged', name: 'versions', body: [{ op: 'replace', path: '/data/v', value: '2' }] });
    const exact = await call(api, 'GET', `/api/v1/namespaces/paged/configmaps?fieldSelector=metadata.name%3Dversions&resourceVersion=${rv1}&resourceVersionMatch=Exact`);
    assert.equal(exact.status, 200, exact.text);
    const ex = exact.json() as { metadata: { resourceVersion: string }; items: { data: { v: string } }[] };
    assert.equal(ex.metadata.resourceVersion, rv1);
    assert.deepEqual(ex.items.map((i) => i.data.v), ['1']);
    const latest = await call(api, 'GET', `/api/v1/namespaces/paged/configmaps/versions?resourceVersion=${rv1}`);
    assert.equal((latest.json() as { data: { v: string } }).data.v, '2', 'NotOlderThan answers the latest');
    const far = await call(api, 'GET', `/api/v1/namespaces/paged/configmaps?resourceVersion=${Number(rv1) + 1_000_000}`);
    assert.equal(far.status, 504, far.text);
    assert.match(String(far.json().message), /Too large resource version/);
    const forbidden = await call(api, 'GET', '/api/v1/namespaces/paged/configmaps?resourceVersionMatch=Exact');
    assert.equal(forbidden.status, 422, forbidden.text);
    const old = await call(api, 'GET', '/api/v1/namespaces/paged/configmaps?resourceVersion=1&resourceVersionMatch=Exact');
    assert.equal(old.status, 410, old.text);
    // A continue token of a state before the cache's window is 410 Expired.
    const tooOld = Buffer.from(JSON.stringify({ rv: 1, start: 'paged/cm-00001' })).toString('base64url');
    const expired = await call(api, 'GET', `/api/v1/namespaces/paged/configmaps?limit=10&continue=${tooOld}`);
    assert.equal(expired.status, 410, expired.text);
    const bad = await call(api, 'GET', '/api/v1/namespaces/paged/configmaps?limit=10&continue=nonsense');
    assert.equal(bad.status, 400, bad.text);
  });

  await t.test('a write is seen by the next GET and LIST (consistent reads)', async () => {
    for (let i = 0; i < 20; i++) {
      const patched = await core.patchNamespacedConfigMap({ namespace: 'paged', name: 'versions', body: [{ op: 'replace', path: '/data/v', value: `w${i}` }] });
      const got = await call(api, 'GET', '/api/v1/namespaces/paged/configmaps/versions');
      assert.equal(got.json().metadata && (got.json().metadata as { resourceVersion: string }).resourceVersion, patched.metadata!.resourceVersion);
      const list = await call(api, 'GET', '/api/v1/namespaces/paged/configmaps?fieldSelector=metadata.name%3Dversions');
      assert.equal((list.json() as { items: { data: { v: string } }[] }).items[0]!.data.v, `w${i}`);
    }
  });

  await t.test('a list longer than 1 MiB is streamed whole, and the Table kubectl asks for pages', async () => {
    const big = await call(api, 'GET', '/api/v1/namespaces/paged/configmaps');
    assert.equal(big.status, 200);
    assert.equal((big.json() as { items: unknown[] }).items.length, N + 1 + 400 + 1);
    const r = await api.kubectl(['get', 'configmaps', '-n', 'paged', '--chunk-size=500', '--no-headers']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim().split('\n').length, N + 1 + 400 + 1);
  });
});

test('a watcher that does not read is ended; another gets every event, and writes go on', { timeout: 300_000 }, async (t) => {
  const api = await startApiServer(t, { args: ['--storage', 'memory', '--watch-buffer-bytes', '256Ki'] });
  const core = api.kubeConfig.makeApiClient(CoreV1Api);
  const cm = await core.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name: 'big' }, data: { v: '' } } });
  const path = `/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=${cm.metadata!.resourceVersion}`;
  const slow = await openWatch(api, path);
  slow.res.pause();
  t.after(() => slow.destroy());
  const fast = await openWatch(api, path);
  t.after(() => fast.destroy());
  let fastSeen = 0;
  onLines(fast.res, (l) => {
    // The type is the line's start: no parse of 40 KB lines, to keep this process's share of the CPU small.
    if (l.startsWith('{"type":"MODIFIED"')) fastSeen++;
  });
  // 400 writes of 40 KB: 16 MB, past what the sockets' buffers (4 MiB to send on this kernel) and the 256 KiB bound hold.
  const WRITES = 400;
  const pad = 'x'.repeat(40_000);
  let answered = 0;
  for (let i = 0; i < WRITES; i++) {
    await core.patchNamespacedConfigMap({ namespace: 'default', name: 'big', body: [{ op: 'replace', path: '/data/v', value: `${i}${pad}` }] });
    answered++;
  }
  assert.equal(answered, WRITES);
  await waitFor('the fast watcher to see every write', 60_000, () => fastSeen === WRITES);
  // The slow one, read now, ends before all of them (its server side was ended, or cut after the grace).
  const slowSeen = await new Promise<{ events: number; ended: string }>((resolve) => {
    let events = 0;
    onLines(slow.res, (l) => {
      if (l.trim()) events++;
    });
    slow.res.on('end', () => resolve({ events, ended: 'end' }));
    slow.res.on('error', () => resolve({ events, ended: 'error' }));
    slow.res.on('aborted', () => resolve({ events, ended: 'aborted' }));
    slow.res.resume();
  });
  assert.ok(slowSeen.events < WRITES, `the slow watcher got ${slowSeen.events} of ${WRITES} events before its watch ended (${slowSeen.ended})`);
  assert.match(api.logs(), /client too slow/);
  const metrics = await call(api, 'GET', '/metrics');
  assert.match(metrics.text, /apiserver_terminated_watchers_total\{resource="configmaps"\} 1\n/);
  // The fast watcher still gets events after the slow one was ended.
  await core.patchNamespacedConfigMap({ namespace: 'default', name: 'big', body: [{ op: 'replace', path: '/data/v', value: 'after' }] });
  await waitFor('the fast watcher to see one more', 30_000, () => fastSeen === WRITES + 1);
});

/**
 * Calls `each` with every whole line of `res`'s body (UTF-8, without its newline) as the chunks arrive;
 * answers its `data` listener, for `res.off`.
 */
function onLines(res: IncomingMessage, each: (line: string) => void): (d: string) => void {
  let buf = '';
  res.setEncoding('utf8');
  const onData = (d: string) => {
    buf += d;
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      each(line);
    }
  };
  res.on('data', onData);
  return onData;
}

/** A watch event as read here: a ConfigMap, or a BOOKMARK's object. */
interface WatchEvent {
  type: string;
  object: { metadata: { name?: string; resourceVersion?: string; annotations?: Record<string, string> }; data?: Record<string, string> };
}

/** Reads a watch's lines as parsed events until `done(events)` holds; answers them. */
function readEvents(res: IncomingMessage, done: (events: WatchEvent[]) => boolean): Promise<WatchEvent[]> {
  const events: WatchEvent[] = [];
  return new Promise((resolve, reject) => {
    const onData = onLines(res, (line) => {
      const l = line.trim();
      if (l) events.push(JSON.parse(l) as WatchEvent);
    });
    // Checked once a chunk's lines are in (listeners run in the order they were added).
    const check = () => {
      if (done(events)) {
        res.off('data', onData);
        res.off('data', check);
        res.pause();
        resolve(events);
      }
    };
    res.on('data', check);
    res.on('end', () => reject(new Error(`the watch ended after ${JSON.stringify(events.map((e) => e.type))}`)));
  });
}

test('a streaming list (sendInitialEvents, kube 1.32 WatchList): the state, its end bookmark, then the changes', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t, { args: ['--storage', 'memory'] });
  const core = api.kubeConfig.makeApiClient(CoreV1Api);
  const cm = await core.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name: 'wl' }, data: { v: '1' } } });
  const rv = Number(cm.metadata!.resourceVersion);

  await t.test("kubectl wait with client-go's WatchListClient gate sees the object and returns", async () => {
    const r = await api.kubectl(['wait', '--for=jsonpath={.data.v}=1', 'configmap/wl', '--timeout=30s'], { env: { KUBE_FEATURE_WatchListClient: 'true' }, timeoutMs: 60_000 });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /configmap\/wl condition met/);
  });

  await t.test('the state as ADDED, a BOOKMARK annotated k8s.io/initial-events-end, then a MODIFIED', async () => {
    const w = await openWatch(api, `/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=${rv}`);
    t.after(() => w.destroy());
    assert.equal(w.res.statusCode, 200);
    const initial = await readEvents(w.res, (evs) => evs.some((e) => e.type === 'BOOKMARK'));
    const end = initial.at(-1)!;
    assert.equal(end.type, 'BOOKMARK');
    assert.equal(end.object.metadata.annotations?.['k8s.io/initial-events-end'], 'true');
    assert.ok(Number(end.object.metadata.resourceVersion) >= rv, `the bookmark's version ${end.object.metadata.resourceVersion} is at least ${rv}`);
    assert.ok(initial.slice(0, -1).every((e) => e.type === 'ADDED'));
    assert.ok(initial.some((e) => e.object.metadata.name === 'wl'), 'wl among the initial events');
    w.res.resume();
    await core.patchNamespacedConfigMap({ namespace: 'default', name: 'wl', body: [{ op: 'replace', path: '/data/v', value: '2' }] });
    const next = await readEvents(w.res, (evs) => evs.length > 0);
    assert.equal(next[0]!.type, 'MODIFIED');
    assert.equal(next[0]!.object.data?.v, '2');
  });

  await t.test('sendInitialEvents=false starts from now: the first event is the next change', async () => {
    const w = await openWatch(api, '/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan');
    t.after(() => w.destroy());
    assert.equal(w.res.statusCode, 200);
    await core.patchNamespacedConfigMap({ namespace: 'default', name: 'wl', body: [{ op: 'replace', path: '/data/v', value: '3' }] });
    const evs = await readEvents(w.res, (e) => e.length > 0);
    assert.equal(evs[0]!.type, 'MODIFIED');
    assert.equal(evs[0]!.object.data?.v, '3');
  });

  await t.test("kube's 422 for sendInitialEvents without NotOlderThan and the reverse, 504 for a version not reached", async () => {
    const a = await call(api, 'GET', '/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true');
    assert.equal(a.status, 422);
    assert.match(a.json().message as string, /resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan/);
    const b = await call(api, 'GET', '/api/v1/namespaces/default/configmaps?watch=true&resourceVersionMatch=NotOlderThan');
    assert.equal(b.status, 422);
    assert.match(b.json().message as string, /resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided/);
    const c = await call(api, 'GET', '/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=Exact');
    assert.equal(c.status, 422);
    assert.match(c.json().message as string, /\[.*Unsupported value: "Exact": supported values: "NotOlderThan"\]/);
    const d = await call(api, 'GET', `/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=${rv + 1_000_000}`);
    assert.equal(d.status, 504);
    assert.match(d.json().message as string, /Too large resource version/);
  });
});

test('events.k8s.io/v1 lists (stored as core Events) keep the resourceVersion semantics of the cache', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t, { args: ['--storage', 'memory'] });
  const core = api.kubeConfig.makeApiClient(CoreV1Api);
  const events = api.kubeConfig.makeApiClient(EventsV1Api);
  await core.createNamespace({ body: { metadata: { name: 'ev' } } });
  // The cache's window starts at its first read: read before the writes, so the state at the first one is in it.
  assert.deepEqual((await events.listNamespacedEvent({ namespace: 'ev' })).items, []);
  const event = (name: string) => ({ metadata: { name }, involvedObject: { kind: 'Pod', namespace: 'ev', name: 'p' }, reason: 'Test', message: name, type: 'Normal' });
  const first = await core.createNamespacedEvent({ namespace: 'ev', body: event('first') });
  await core.createNamespacedEvent({ namespace: 'ev', body: event('second') });
  const rv = first.metadata!.resourceVersion!;

  const exact = await events.listNamespacedEvent({ namespace: 'ev', resourceVersion: rv, resourceVersionMatch: 'Exact' });
  assert.equal(exact.metadata!.resourceVersion, rv);
  assert.deepEqual(exact.items.map((e) => e.metadata!.name), ['first'], 'the state at the first event');
  assert.equal(exact.items[0]!.note, 'first', 'converted to events.k8s.io/v1 (note is the core message)');
  const now = await events.listNamespacedEvent({ namespace: 'ev', limit: 1 });
  assert.deepEqual(now.items.map((e) => e.metadata!.name), ['first']);
  assert.equal(now.metadata!.remainingItemCount, 1);
  const rest = await events.listNamespacedEvent({ namespace: 'ev', _continue: now.metadata!._continue! });
  assert.deepEqual(rest.items.map((e) => e.metadata!.name), ['second']);
  const bySelector = await events.listNamespacedEvent({ namespace: 'ev', fieldSelector: 'metadata.name=second' });
  assert.deepEqual(bySelector.items.map((e) => e.metadata!.name), ['second']);

  const tooNew = await call(api, 'GET', `/apis/events.k8s.io/v1/namespaces/ev/events?resourceVersion=${Number(rv) + 1_000_000}`);
  assert.equal(tooNew.status, 504);
  const noVersion = await call(api, 'GET', '/apis/events.k8s.io/v1/namespaces/ev/events?resourceVersionMatch=Exact');
  assert.equal(noVersion.status, 422);
  const r = await api.kubectl(['get', 'events.events.k8s.io', '-n', 'ev', '--no-headers']);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout.trim().split('\n').length, 2, 'kubectl\'s Table of both');
});

test('pods indexed by spec.nodeName: lists and watches by node give exactly what filtering every pod gives', { timeout: 180_000 }, async (t) => {
  const api = await startApiServer(t, { args: ['--storage', 'memory'] });
  const core = api.kubeConfig.makeApiClient(CoreV1Api);
  const NODES = ['n0', 'n1', 'n2', 'n3'];
  const pod = (name: string, nodeName?: string) => ({ metadata: { name, labels: { app: 'idx' } }, spec: { ...(nodeName ? { nodeName } : {}), containers: [{ name: 'c', image: 'busybox' }] } });
  for (let i = 0; i < 20; i++) await core.createNamespacedPod({ namespace: 'default', body: pod(`p-${String(i).padStart(2, '0')}`, NODES[i % 4]) });
  await core.createNamespacedPod({ namespace: 'default', body: pod('unbound') });
  const atOld = await core.listNamespacedPod({ namespace: 'default' });
  const old = Number(atOld.metadata!.resourceVersion);
  for (let i = 20; i < 40; i++) await core.createNamespacedPod({ namespace: 'default', body: pod(`p-${String(i).padStart(2, '0')}`, NODES[i % 4]) });
  const names = (l: { items: { metadata?: { name?: string } }[] }) => l.items.map((p) => p.metadata!.name!);
  const onNode = (l: { items: { metadata?: { name?: string }; spec?: { nodeName?: string } }[] }, node: string) => names({ items: l.items.filter((p) => (p.spec?.nodeName ?? '') === node) });

  /** Every watch event of a raw watch, as (type, name, resourceVersion). */
  const collect = async (path: string) => {
    const w = await openWatch(api, path);
    t.after(() => w.destroy());
    assert.equal(w.res.statusCode, 200);
    const events: { type: string; name: string; rv: string; node: string }[] = [];
    onLines(w.res, (l) => {
      if (!l.trim()) return;
      const e = JSON.parse(l) as { type: string; object: { metadata: { name: string; resourceVersion: string }; spec?: { nodeName?: string } } };
      events.push({ type: e.type, name: e.object.metadata.name, rv: e.object.metadata.resourceVersion, node: e.object.spec?.nodeName ?? '' });
    });
    return events;
  };
  // Watches by node from now and from the older version, and every pod's watch from the older version (the oracle).
  const rv0 = (await core.listNamespacedPod({ namespace: 'default' })).metadata!.resourceVersion!;
  // '' too: the unbound pods' selector, which a pod leaves when bound (its DELETED found by the old object's value).
  const WATCHED = [...NODES, ''];
  const fromNow = Object.fromEntries(await Promise.all(WATCHED.map(async (n) => [n, await collect(`/api/v1/namespaces/default/pods?watch=true&fieldSelector=spec.nodeName%3D${n}&resourceVersion=${rv0}`)] as const)));
  const fromOld = Object.fromEntries(await Promise.all(WATCHED.map(async (n) => [n, await collect(`/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3D${n},metadata.namespace%3Ddefault&resourceVersion=${old}`)] as const)));
  const all = await collect(`/api/v1/namespaces/default/pods?watch=true&resourceVersion=${old}`);

  await t.test('a list by node (alone, with other terms, paged, at an exact older version) is the node’s pods of the full list', async () => {
    const full = await core.listNamespacedPod({ namespace: 'default' });
    const at = full.metadata!.resourceVersion!;
    const fullOld = await core.listNamespacedPod({ namespace: 'default', resourceVersion: String(old), resourceVersionMatch: 'Exact' });
    for (const n of [...NODES, '']) {
      const byNode = await core.listNamespacedPod({ namespace: 'default', fieldSelector: `spec.nodeName=${n}`, resourceVersion: at, resourceVersionMatch: 'Exact' });
      assert.deepEqual(names(byNode), onNode(full, n), `node "${n}"`);
      assert.equal(byNode.metadata!.resourceVersion, at);
      assert.deepEqual(names(await core.listNamespacedPod({ namespace: 'default', fieldSelector: `spec.nodeName=${n}`, labelSelector: 'app=idx' })), onNode(full, n));
      assert.deepEqual(names(await core.listPodForAllNamespaces({ fieldSelector: `metadata.name!=p-01,spec.nodeName=${n}` })), onNode(full, n).filter((x) => x !== 'p-01'));
      const paged: string[] = [];
      let token: string | undefined;
      do {
        const page = await core.listNamespacedPod({ namespace: 'default', fieldSelector: `spec.nodeName=${n}`, limit: 3, _continue: token });
        paged.push(...names(page));
        token = page.metadata!._continue;
      } while (token);
      assert.deepEqual(paged, onNode(full, n), `node "${n}" paged by 3`);
      const before = await core.listNamespacedPod({ namespace: 'default', fieldSelector: `spec.nodeName=${n}`, resourceVersion: String(old), resourceVersionMatch: 'Exact' });
      assert.deepEqual(names(before), onNode(fullOld, n), `node "${n}" at ${old}`);
    }
    assert.deepEqual(onNode(full, 'n1').length, 10);
  });

  await t.test('watches by node get, in order, exactly the events a filter of every pod’s events gives: a pod bound later, changed, deleted', async () => {
    await core.createNamespacedPodBinding({ namespace: 'default', name: 'unbound', body: { metadata: { name: 'unbound' }, target: { kind: 'Node', name: 'n1' } } });
    await core.patchNamespacedPod({ namespace: 'default', name: 'p-05', body: [{ op: 'add', path: '/metadata/labels/x', value: 'y' }] });
    await core.deleteNamespacedPod({ namespace: 'default', name: 'p-02', gracePeriodSeconds: 0 });
    await core.deleteNamespacedPod({ namespace: 'default', name: 'unbound', gracePeriodSeconds: 0 });
    const last = await core.createNamespacedPod({ namespace: 'default', body: pod('p-last', 'n3') });
    const lastRv = last.metadata!.resourceVersion!;
    await waitFor('every pod’s watch to see the last write', 30_000, () => all.some((e) => e.rv === lastRv));
    // kube's typeFor through the selector, applied to every pod's events: the node's view of them.
    const expect = (node: string, from: number) => {
      const state = new Map<string, string>(atOld.items.map((p) => [p.metadata!.name!, p.spec?.nodeName ?? '']));
      const out: { type: string; name: string; rv: string }[] = [];
      for (const e of all) {
        const before = state.get(e.name);
        const isIn = e.node === node;
        const was = before === undefined ? undefined : before === node;
        let type: string | undefined;
        if (e.type === 'ADDED') type = isIn ? 'ADDED' : undefined;
        else if (e.type === 'MODIFIED') type = isIn && (was ?? isIn) ? 'MODIFIED' : isIn ? 'ADDED' : was ? 'DELETED' : undefined;
        else type = (was ?? isIn) ? 'DELETED' : undefined;
        if (e.type === 'DELETED') state.delete(e.name);
        else state.set(e.name, e.node);
        if (type && Number(e.rv) > from) out.push({ type, name: e.name, rv: e.rv });
      }
      return out;
    };
    const strip = (evs: { type: string; name: string; rv: string }[]) => evs.map(({ type, name, rv }) => ({ type, name, rv }));
    for (const n of WATCHED) {
      const wantNow = expect(n, Number(rv0));
      const wantOld = expect(n, old);
      await waitFor(`node ${n}'s watches to get their events`, 30_000, () => fromNow[n]!.length >= wantNow.length && fromOld[n]!.length >= wantOld.length);
      assert.deepEqual(strip(fromNow[n]!), wantNow, `node ${n} from ${rv0}`);
      assert.deepEqual(strip(fromOld[n]!), wantOld, `node ${n} from ${old}`);
    }
    // The pod bound later is ADDED on its node, and its deletion reaches that node's watchers only.
    assert.deepEqual(strip(fromNow.n1!).filter((e) => e.name === 'unbound').map((e) => e.type).slice(0, 1), ['ADDED']);
    assert.ok(fromNow.n1!.some((e) => e.name === 'unbound' && e.type === 'DELETED'));
    assert.ok(!fromNow.n0!.some((e) => e.name === 'unbound' || e.name === 'p-05'));
    assert.ok(fromNow.n2!.some((e) => e.name === 'p-02' && e.type === 'DELETED'));
    assert.deepEqual(strip(fromNow['']!).map((e) => `${e.type} ${e.name}`), ['DELETED unbound'], 'bound: it left the unbound pods');
    assert.ok(fromOld.n0!.some((e) => e.name === 'p-20' && e.type === 'ADDED'), 'a watch from the older version gets the pods created since');
  });

  await t.test('apiserver_storage_objects counts the cached pods', async () => {
    const count = (await core.listPodForAllNamespaces()).items.length;
    const metrics = await call(api, 'GET', '/metrics');
    assert.match(metrics.text, new RegExp(`apiserver_storage_objects\\{resource="pods"\\} ${count}\\n`));
  });
});

test('events.k8s.io/v1 Tables come from the watch cache, with the columns kubectl prints for events', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t, { args: ['--storage', 'memory'] });
  const core = api.kubeConfig.makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: 'ev' } } });
  // The cache's window starts at its first read: kubectl's, before the writes.
  let r = await api.kubectl(['get', 'events.events.k8s.io', '-n', 'ev']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stderr, /No resources found in ev namespace/);
  const event = (name: string) => ({ metadata: { name }, involvedObject: { kind: 'Pod', namespace: 'ev', name: 'p' }, reason: 'Test', message: `said ${name}`, type: 'Normal', source: { component: 'kubelet', host: 'node-1' }, count: 3 });
  const first = await core.createNamespacedEvent({ namespace: 'ev', body: event('first') });
  await core.createNamespacedEvent({ namespace: 'ev', body: event('second') });
  const rv = first.metadata!.resourceVersion!;

  r = await api.kubectl(['get', 'events.events.k8s.io', '-A']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^NAMESPACE\s+LAST SEEN\s+TYPE\s+REASON\s+OBJECT\s+MESSAGE$/m);
  assert.match(r.stdout, /^ev\s+\S+\s+Normal\s+Test\s+pod\/p\s+said first$/m);
  assert.match(r.stdout, /^ev\s+\S+\s+Normal\s+Test\s+pod\/p\s+said second$/m);
  r = await api.kubectl(['get', 'events.v1.events.k8s.io', '-n', 'ev', '-o', 'wide']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^LAST SEEN\s+TYPE\s+REASON\s+OBJECT\s+SUBOBJECT\s+SOURCE\s+MESSAGE\s+FIRST SEEN\s+COUNT\s+NAME$/m);
  assert.match(r.stdout, /Normal\s+Test\s+pod\/p\s+kubelet, node-1\s+said first\s+\S+\s+3\s+first$/m);
  // One by name: a Table too (kubectl prints the same columns).
  r = await api.kubectl(['get', 'events.events.k8s.io', '-n', 'ev', 'first']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^LAST SEEN\s+TYPE\s+REASON\s+OBJECT\s+MESSAGE\n\S+\s+Normal\s+Test\s+pod\/p\s+said first\n$/);

  // From the cache: a Table at an exact version is the state then (the store would answer its latest).
  const TABLE = 'application/json;as=Table;v=v1;g=meta.k8s.io';
  const exact = await rawRequest(api, 'GET', `/apis/events.k8s.io/v1/namespaces/ev/events?resourceVersion=${rv}&resourceVersionMatch=Exact&includeObject=Object`, undefined, { accept: TABLE });
  assert.equal(exact.status, 200, exact.text);
  const table = exact.json() as { kind: string; metadata: { resourceVersion: string }; rows: { cells: unknown[]; object: { apiVersion: string; kind: string; note?: string; regarding?: { name: string } } }[] };
  assert.equal(table.kind, 'Table');
  assert.equal(table.metadata.resourceVersion, rv);
  assert.deepEqual(table.rows.map((row) => row.cells[6]), ['said first'], 'the state at the first event');
  const o = table.rows[0]!.object;
  assert.deepEqual([o.apiVersion, o.kind, o.note, o.regarding?.name], ['events.k8s.io/v1', 'Event', 'said first', 'p'], 'rows carry events.k8s.io/v1 objects');
  const tooNew = await rawRequest(api, 'GET', `/apis/events.k8s.io/v1/namespaces/ev/events?resourceVersion=${Number(rv) + 1_000_000}`, undefined, { accept: TABLE });
  assert.equal(tooNew.status, 504, tooNew.text);
});
