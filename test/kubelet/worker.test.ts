/**
 * kube32-sim end to end: a real API server and two real workers (127.0.0.2 and 127.0.0.3).
 * Pods start, serve, tick, log (kubectl logs, -f, --tail, --timestamps, --previous), restart after
 * a trap, are checkpointed through the node proxy with each status, restore on the other worker
 * with their state, are deleted, and a worker stopped with SIGTERM drains itself.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createServer as createNetServer } from 'node:net';
import { join } from 'node:path';
import type { V1Lease, V1Node, V1Pod } from '@kubernetes/client-node';
import { fetch } from 'undici';
import { readBytes } from '../../src/api/index.ts';
import { startCluster, fixturePod, freePort, buildWat, type Cluster } from './cluster.ts';

interface Count { count: number; ticks: number; events: number; restored: number; podTimeMs: number }

async function get(url: string): Promise<{ status: number; headers: Headers; text: string }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  return { status: res.status, headers: res.headers as unknown as Headers, text: await res.text() };
}

async function counter(address: string, port: number, path = '/count'): Promise<Count> {
  const r = await get(`http://${address}:${port}${path}`);
  assert.equal(r.status, 200, `GET ${path}: ${r.status} ${r.text}`);
  return JSON.parse(r.text) as Count;
}

function cond(pod: V1Pod | undefined, type: string): string | undefined {
  return pod?.status?.conditions?.find((c) => c.type === type)?.status;
}

async function runningPod(c: Cluster, name: string): Promise<V1Pod> {
  return c.until(`pod ${name} Running and Ready`, async () => {
    const p = await c.getPod(name);
    return p?.status?.phase === 'Running' && cond(p, 'Ready') === 'True' ? p : undefined;
  }, 20_000);
}

async function proxy(c: Cluster, node: string, path: string, method = 'POST'): Promise<{ status: number; headers: Record<string, string>; body: Buffer }> {
  const res = await c.admin.request(method, `/api/v1/nodes/${node}/proxy/${path}`);
  const body = await readBytes(res.body);
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) headers[k] = String(v);
  return { status: res.status, headers, body };
}

test('kube32-sim runs, serves, checkpoints and restores pods, and drains itself', { timeout: 240_000 }, async (t) => {
  const c = await startCluster(t);
  const w1 = await c.startWorker('w1', '127.0.0.2', ['--heap', '64Mi', '--labels', 'zone=a,kube32.io/board=sim']);
  const w2 = await c.startWorker('w2', '127.0.0.3', ['--heap', '1Mi', '--interp-mops', '1450']);

  await t.test('the nodes register Ready with their capacity, labels, addresses, speed and Lease', async () => {
    const n1 = await c.until('w1 Ready', async () => {
      const n = await c.admin.json<V1Node>('GET', '/api/v1/nodes/w1');
      return n.status?.conditions?.find((x) => x.type === 'Ready')?.status === 'True' ? n : undefined;
    });
    assert.equal(n1.status?.capacity?.memory, '64Mi');
    assert.equal(n1.status?.allocatable?.memory, '64Mi');
    assert.equal(n1.metadata?.labels?.['kubernetes.io/os'], 'linux');
    assert.ok(n1.metadata?.labels?.['kubernetes.io/arch']);
    assert.equal(n1.metadata?.labels?.['kubernetes.io/hostname'], 'w1');
    assert.equal(n1.metadata?.labels?.zone, 'a');
    assert.deepEqual(n1.status?.addresses?.find((a) => a.type === 'InternalIP')?.address, '127.0.0.2');
    assert.ok((n1.status?.daemonEndpoints?.kubeletEndpoint?.Port ?? 0) > 0);
    assert.match(n1.metadata?.annotations?.['kube32.io/interp-mops'] ?? '', /^\d+(\.\d)?$/);
    assert.equal(n1.status?.conditions?.find((x) => x.type === 'MemoryPressure')?.status, 'False');
    const n2 = await c.admin.json<V1Node>('GET', '/api/v1/nodes/w2');
    assert.equal(n2.metadata?.annotations?.['kube32.io/interp-mops'], '1450');
    const lease = await c.admin.json<V1Lease>('GET', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/w1');
    assert.equal(lease.spec?.holderIdentity, readFileSync(join(c.tmp, 'w1', 'lease-holder-identity'), 'utf8').trim(), 'the holder identity kept in its data dir');
    assert.ok(lease.spec?.renewTime);
    const r = await c.kubectl(['get', 'nodes']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /w1\s+Ready/);
    assert.match(r.stdout, /w2\s+Ready/);
  });

  await t.test('a Ready condition someone else changed (the node lifecycle controller) is put right at the next heartbeat', async () => {
    const node = await c.admin.json<V1Node>('GET', '/api/v1/nodes/w1');
    const conditions = (node.status?.conditions ?? []).map((x) =>
      x.type === 'Ready' ? { ...x, status: 'Unknown', reason: 'NodeStatusUnknown', message: 'Kubelet stopped posting node status.' } : x);
    await c.admin.json('PATCH', '/api/v1/nodes/w1/status', { body: { status: { conditions } }, contentType: 'application/merge-patch+json' });
    const ready = await c.until('w1 Ready again', async () => {
      const n = await c.admin.json<V1Node>('GET', '/api/v1/nodes/w1');
      const r = n.status?.conditions?.find((x) => x.type === 'Ready');
      return r?.status === 'True' ? r : undefined;
    }, 30_000);
    assert.equal(ready.reason, 'KubeletReady');
  });

  const port1 = await freePort('127.0.0.2');
  let snapshot: Buffer | undefined;
  let countBefore = 0;

  await t.test('a pod starts with the status kubectl users expect, serves HTTP on its node address and ticks', async () => {
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('c1', 'w1', port1, { annotations: { 'kube32.io/tick-interval': '50ms' } }) });
    const p = await runningPod(c, 'c1');
    assert.equal(p.status?.podIP, '127.0.0.2');
    assert.equal(p.status?.hostIP, '127.0.0.2');
    assert.ok(p.status?.startTime);
    for (const type of ['PodScheduled', 'Initialized', 'ContainersReady', 'Ready']) assert.equal(cond(p, type), 'True', type);
    const cs = p.status?.containerStatuses?.[0];
    assert.equal(cs?.name, 'c');
    assert.equal(cs?.ready, true);
    assert.equal(cs?.restartCount, 0);
    assert.ok(cs?.state?.running?.startedAt);
    assert.equal(cs?.imageID, `sha256:${c.module.sha256}`);
    assert.equal((await counter('127.0.0.2', port1)).count, 1);
    assert.equal((await counter('127.0.0.2', port1)).count, 2);
    await c.until('ticks', async () => (await counter('127.0.0.2', port1, '/view')).ticks >= 3);
    const r = await c.kubectl(['get', 'pod', 'c1', '-o', 'wide']);
    assert.match(r.stdout, /c1\s+1\/1\s+Running\s+0/);
    // The kubelet's events, as kubectl describe lists them.
    const reasons = await c.until('the kubelet events of c1', async () => {
      const list = await c.admin.json<{ items: Array<{ reason?: string; involvedObject?: { name?: string }; source?: { component?: string } }> }>('GET', '/api/v1/namespaces/default/events');
      const mine = list.items.filter((e) => e.involvedObject?.name === 'c1' && e.source?.component === 'kubelet').map((e) => e.reason);
      return mine.includes('Started') ? mine : undefined;
    });
    for (const reason of ['Pulling', 'Pulled', 'Created', 'Started']) assert.ok(reasons.includes(reason), reason);
    // The list comes sorted by name, which is the order kubectl keeps for events of one second: the
    // kubelet's names sort by time, so the list reads in the order things happened.
    const order = reasons.filter((r) => ['Pulling', 'Pulled', 'Created', 'Started'].includes(r ?? ''));
    assert.deepEqual(order.slice(0, 4), ['Pulling', 'Pulled', 'Created', 'Started'], `events in name order: ${order.join(', ')}`);
    const d = await c.kubectl(['describe', 'pod', 'c1']);
    assert.match(d.stdout, /Started\s+.*Started container c/);
  });

  await t.test('a container gets its env (value, fieldRef, configMapKeyRef) and its ConfigMap assets; what is missing waits with the reason', async () => {
    await c.admin.json('POST', '/api/v1/namespaces/default/configmaps', {
      body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'cfg' }, data: { motd: 'hello from a ConfigMap', greeting: 'hi' } },
    });
    const port = await freePort('127.0.0.2');
    const p = fixturePod('greeter', 'w1', port);
    p.spec!.containers[0]!.env = [{ name: 'GREETING', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'greeting' } } }];
    p.spec!.volumes = [{ name: 'assets', configMap: { name: 'cfg' } }];
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: p });
    await runningPod(c, 'greeter');
    const r = await get(`http://127.0.0.2:${port}/greet`);
    assert.equal(r.text, 'hi|hello from a ConfigMap');
    const q = fixturePod('nodename', 'w1', await freePort('127.0.0.2'));
    q.spec!.containers[0]!.env = [{ name: 'GREETING', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } }];
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: q });
    await runningPod(c, 'nodename');
    const qport = q.spec!.containers[0]!.ports![0]!.containerPort;
    assert.equal((await get(`http://127.0.0.2:${qport}/greet`)).text, 'w1|');
    // A ConfigMap that does not exist: CreateContainerConfigError, the pod stays Pending.
    const m = fixturePod('nocfg', 'w1', await freePort('127.0.0.2'));
    m.spec!.volumes = [{ name: 'assets', configMap: { name: 'absent' } }];
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: m });
    const waiting = await c.until('CreateContainerConfigError', async () => {
      const pod = await c.getPod('nocfg');
      const w = pod?.status?.containerStatuses?.[0]?.state?.waiting;
      return w?.reason === 'CreateContainerConfigError' ? pod : undefined;
    });
    assert.equal(waiting.status?.phase, 'Pending');
    assert.match(waiting.status?.containerStatuses?.[0]?.state?.waiting?.message ?? '', /configmap "absent" not found/);
    for (const name of ['greeter', 'nodename', 'nocfg']) await c.admin.json('DELETE', `/api/v1/namespaces/default/pods/${name}`);
  });

  await t.test('an image the store lacks waits in ImagePullBackOff; a module with an unknown import is refused at push', async () => {
    const missing = fixturePod('nopull', 'w1', await freePort('127.0.0.2'));
    missing.spec!.containers[0]!.image = `kube32.io/wasm-sha256:${'0'.repeat(64)}`;
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: missing });
    const w = await c.until('ErrImagePull or ImagePullBackOff', async () => {
      const s = (await c.getPod('nopull'))?.status?.containerStatuses?.[0]?.state?.waiting;
      return s && (s.reason === 'ErrImagePull' || s.reason === 'ImagePullBackOff') ? s : undefined;
    });
    assert.match(w.message ?? '', /0{64}/);
    // A module with an unknown import is refused at push (the API server loads it as a kubelet would),
    // so no pod can name it: the kubelet's CreateContainerError for it is left to other API servers.
    await assert.rejects(
      c.admin.json('PUT', '/apis/kube32.io/v1/modules/bad-import/data', { body: buildWat('bad-import', c.tmp), contentType: 'application/octet-stream' }),
      /unknown import k32\.foo/,
    );
    for (const name of ['nopull']) await c.admin.json('DELETE', `/api/v1/namespaces/default/pods/${name}`);
  });

  await t.test('a bare module name no module had at create waits in ImagePullBackOff naming it, and starts once it is pushed', async () => {
    const port = await freePort('127.0.0.2');
    const late = fixturePod('latecomer', 'w1', port);
    late.spec!.containers[0]!.image = 'latecomer';
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: late });
    const w = await c.until('ErrImagePull or ImagePullBackOff', async () => {
      const s = (await c.getPod('latecomer'))?.status?.containerStatuses?.[0]?.state?.waiting;
      return s && (s.reason === 'ErrImagePull' || s.reason === 'ImagePullBackOff') ? s : undefined;
    });
    assert.match(w.message ?? '', /no module "latecomer" is stored: push it with kube32-cli push/);
    await c.admin.json('PUT', '/apis/kube32.io/v1/modules/latecomer/data', { body: buildWat('counter', c.tmp), contentType: 'application/octet-stream' });
    await c.until('latecomer Running', async () => (await c.getPod('latecomer'))?.status?.phase === 'Running', 30_000);
    assert.equal((await counter('127.0.0.2', port)).count, 1);
    await c.admin.json('DELETE', '/api/v1/namespaces/default/pods/latecomer');
  });

  await t.test('kubectl logs shows the pod log, with --tail, --timestamps and -f', async () => {
    const all = await c.kubectl(['logs', 'c1']);
    assert.equal(all.code, 0, all.stderr);
    assert.deepEqual(all.stdout.trim().split('\n').slice(0, 3), ['init', 'request', 'request']);
    const tail = await c.kubectl(['logs', 'c1', '--tail=1']);
    assert.equal(tail.stdout, 'request\n');
    const ts = await c.kubectl(['logs', 'c1', '--timestamps', '--tail=1']);
    assert.match(ts.stdout, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z request\n$/);
    const since = await c.kubectl(['logs', 'c1', '--since=1h']);
    assert.match(since.stdout, /^init\n/);
  });

  await t.test('kubectl logs -f streams lines as the pod writes them', async () => {
    const proc = spawn('kubectl', ['--kubeconfig', c.kubeconfigPath, 'logs', '-f', 'c1', '--tail=0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const ended = new Promise((r) => proc.once('exit', r));
    t.after(() => {
      proc.kill('SIGKILL');
    });
    let out = '';
    proc.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    // Requests until one's log line arrives (the first may race kubectl's connection).
    await c.until('a streamed log line', async () => {
      await counter('127.0.0.2', port1, '/view');
      return out.includes('request\n');
    });
    proc.kill('SIGTERM');
    await ended;
  });

  await t.test('checkpoint through the node proxy: 200 with the seed headers, same bytes while frozen, Ready False, a request held until the thaw', async () => {
    countBefore = (await counter('127.0.0.2', port1, '/view')).count;
    const a = await proxy(c, 'w1', 'checkpoint/default/c1/c?leave=frozen&timeoutMs=5000');
    assert.equal(a.status, 200, a.body.toString());
    assert.equal(a.headers['content-type'], 'application/octet-stream');
    assert.equal(Number(a.headers['content-length']), a.body.length);
    assert.equal(a.body.subarray(0, 4).toString(), 'K32S');
    assert.equal(a.headers['x-kube32-image-sha256'], c.module.sha256);
    const trailer = createHash('sha256').update(a.body.subarray(0, a.body.length - 32)).digest('hex');
    assert.equal(a.headers['x-kube32-snapshot-sha256'], trailer);
    assert.equal(a.body.subarray(a.body.length - 32).toString('hex'), trailer);
    assert.ok(Number(a.headers['x-kube32-pod-time-ms']) > 0);
    // Frozen: a request is held (issue 26: no 503 while the pod can run again), Ready turns False within 2 s.
    const frozenAt = Date.now();
    const held = get(`http://127.0.0.2:${port1}/count`);
    await c.until('Ready False', async () => cond(await c.getPod('c1'), 'Ready') === 'False', 2000);
    assert.ok(Date.now() - frozenAt <= 2000);
    const b = await proxy(c, 'w1', 'checkpoint/default/c1/c?leave=frozen');
    assert.equal(b.status, 200);
    assert.ok(a.body.equals(b.body), 'the same frozen pod gives the same snapshot');
    snapshot = a.body;
    const th = await proxy(c, 'w1', 'thaw/default/c1/c');
    assert.equal(th.status, 200);
    assert.deepEqual(JSON.parse(th.body.toString()), { thawed: true });
    const again = await proxy(c, 'w1', 'thaw/default/c1/c');
    assert.equal(again.status, 404);
    // The held request ran once the pod thawed, once.
    const r = await held;
    assert.equal(r.status, 200, r.text);
    assert.equal((JSON.parse(r.text) as Count).count, countBefore + 1);
    assert.equal((await counter('127.0.0.2', port1)).count, countBefore + 2);
    await c.until('Ready True again', async () => cond(await c.getPod('c1'), 'Ready') === 'True', 2000);
    // leave=running (the default) answers the snapshot and the pod keeps serving.
    const run = await proxy(c, 'w1', 'checkpoint/default/c1/c');
    assert.equal(run.status, 200);
    assert.equal((await get(`http://127.0.0.2:${port1}/view`)).status, 200);
  });

  await t.test('checkpoint refusals: 404, 409 NotMovable with every blocker, 504 Timeout, 400 for bad parameters', async () => {
    const nf = await proxy(c, 'w1', 'checkpoint/default/nope/c');
    assert.equal(nf.status, 404);
    assert.equal(JSON.parse(nf.body.toString()).reason, 'NotFound');
    const nc = await proxy(c, 'w1', 'checkpoint/default/c1/other');
    assert.equal(nc.status, 404);
    const bad = await proxy(c, 'w1', 'checkpoint/default/c1/c?timeoutMs=0');
    assert.equal(bad.status, 400);
    const port = await freePort('127.0.0.2');
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('never', 'w1', port, { annotations: { 'kube32.io/migration': 'Never' } }) });
    await runningPod(c, 'never');
    const nm = await proxy(c, 'w1', 'checkpoint/default/never/c');
    assert.equal(nm.status, 409, nm.body.toString());
    const body = JSON.parse(nm.body.toString());
    assert.equal(body.reason, 'NotMovable');
    assert.deepEqual(body.blockers, ['annotation kube32.io/migration: Never']);
    // A k32_fs descriptor held open between calls is a node-side blocker.
    assert.equal((await get(`http://127.0.0.2:${port}/open`)).status, 200);
    const open = await proxy(c, 'w1', 'checkpoint/default/never/c');
    assert.equal(open.status, 409);
    const ob = JSON.parse(open.body.toString()).blockers as string[];
    assert.equal(ob[0], 'annotation kube32.io/migration: Never');
    assert.match(ob[1] ?? '', /^open file .*f\.txt \(descriptor \d+\)$/);
    // A call that outlasts timeoutMs: 504 Timeout, and the pod keeps running.
    const lines = async () => (await proxy(c, 'w1', 'containerLogs/default/c1/c', 'GET')).body.toString().split('\n').length;
    const before = await lines();
    const spin = get(`http://127.0.0.2:${port1}/spin`);
    await c.until('the spin call to be running', async () => (await lines()) > before);
    const to = await proxy(c, 'w1', 'checkpoint/default/c1/c?timeoutMs=300');
    assert.equal(to.status, 504, to.body.toString());
    const tb = JSON.parse(to.body.toString());
    assert.equal(tb.reason, 'Timeout');
    assert.deepEqual(tb.blockers, ['call k32_handle still running after 300 ms']);
    assert.equal((await spin).status, 200);
    assert.equal((await get(`http://127.0.0.2:${port1}/view`)).status, 200);
  });

  await t.test('only the control plane may call the kubelet endpoint directly', async () => {
    const n1 = await c.admin.json<V1Node>('GET', '/api/v1/nodes/w1');
    const kport = n1.status?.daemonEndpoints?.kubeletEndpoint?.Port;
    const none = await fetch(`http://127.0.0.2:${kport}/checkpoint/default/c1/c`, { method: 'POST' });
    assert.equal(none.status, 401);
    const nodeToken = /token:\s*(\S+)/.exec((await import('node:fs')).readFileSync(await c.nodeKubeconfig('w2'), 'utf8'))?.[1];
    if (nodeToken) {
      const other = await fetch(`http://127.0.0.2:${kport}/checkpoint/default/c1/c`, { method: 'POST', headers: { authorization: `Bearer ${nodeToken}` } });
      assert.equal(other.status, 403);
    }
    assert.equal((await fetch(`http://127.0.0.2:${kport}/healthz`)).status, 200);
  });

  await t.test('a Checkpoint restores on the other worker with its state; a Checkpoint without data ends the pod Failed with RestoreError', async () => {
    assert.ok(snapshot);
    await c.admin.json('POST', '/apis/kube32.io/v1/namespaces/default/checkpoints', {
      body: { apiVersion: 'kube32.io/v1', kind: 'Checkpoint', metadata: { name: 'c1-save' }, spec: { podName: 'c1' } },
    });
    await c.admin.json('PUT', '/apis/kube32.io/v1/namespaces/default/checkpoints/c1-save/data', { body: snapshot, contentType: 'application/octet-stream' });
    const port = await freePort('127.0.0.3');
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('c1r', 'w2', port, { annotations: { 'kube32.io/restore-from': 'c1-save' } }) });
    await runningPod(c, 'c1r');
    const s = await counter('127.0.0.3', port);
    assert.equal(s.restored, 1);
    assert.equal(s.count, countBefore + 1, 'the count carries over');
    const logs = await c.kubectl(['logs', 'c1r']);
    assert.match(logs.stdout, /^restored\n/);
    // No data: Failed, RestoreError, never restarted.
    await c.admin.json('POST', '/apis/kube32.io/v1/namespaces/default/checkpoints', {
      body: { apiVersion: 'kube32.io/v1', kind: 'Checkpoint', metadata: { name: 'empty' }, spec: { podName: 'c1' } },
    });
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('bad', 'w2', await freePort('127.0.0.3'), { annotations: { 'kube32.io/restore-from': 'empty' } }) });
    const bad = await c.until('pod bad Failed', async () => {
      const p = await c.getPod('bad');
      return p?.status?.phase === 'Failed' ? p : undefined;
    });
    const term = bad.status?.containerStatuses?.[0]?.state?.terminated;
    assert.equal(term?.reason, 'RestoreError');
    assert.match(term?.message ?? '', /^cannot restore the snapshot: /);
    assert.equal(bad.status?.containerStatuses?.[0]?.restartCount, 0);
  });

  await t.test('a channel message reaches the subscribed pods of the namespace on the node', async () => {
    const port = await freePort('127.0.0.2');
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('sub', 'w1', port, { annotations: { 'kube32.io/topics': 'other, news' } }) });
    await runningPod(c, 'sub');
    assert.equal((await get(`http://127.0.0.2:${port1}/publish`)).status, 200);
    await c.until('the event at the subscriber', async () => (await counter('127.0.0.2', port, '/view')).events === 1);
    assert.equal((await counter('127.0.0.2', port1, '/view')).events, 0, 'the publisher does not subscribe');
  });

  await t.test('a channel message reaches subscribed pods on another node through the node proxy', async () => {
    const port = await freePort('127.0.0.3');
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('sub2', 'w2', port, { annotations: { 'kube32.io/topics': 'news' } }) });
    await runningPod(c, 'sub2');
    assert.equal((await get(`http://127.0.0.2:${port1}/publish`)).status, 200);
    try {
      await c.until('the event on the other node', async () => (await counter('127.0.0.3', port, '/view')).events === 1, 5000);
    } finally {
      await c.admin.json('DELETE', `/api/v1/namespaces/default/pods/sub2`);
    }
  });

  await t.test('a trap ends the container with reason Trap; it restarts afresh and --previous shows the old log', async () => {
    const r = await get(`http://127.0.0.2:${port1}/trap`);
    assert.equal(r.status, 502);
    const p = await c.until('restart after the trap', async () => {
      const p = await c.getPod('c1');
      const cs = p?.status?.containerStatuses?.[0];
      return cs?.restartCount === 1 && cs.state?.running ? p : undefined;
    });
    const cs = p.status?.containerStatuses?.[0];
    assert.equal(cs?.lastState?.terminated?.reason, 'Trap');
    assert.equal(cs?.lastState?.terminated?.exitCode, 1);
    assert.equal((await counter('127.0.0.2', port1)).count, 1, 'k32_init again: the count starts afresh');
    const prev = await c.kubectl(['logs', 'c1', '--previous']);
    assert.equal(prev.code, 0, prev.stderr);
    assert.match(prev.stdout, /^init\n/);
    const cur = await c.kubectl(['logs', 'c1']);
    assert.deepEqual(cur.stdout.split('\n').slice(0, 2), ['init', 'request']);
  });

  await t.test('deleting a pod stops it within its grace period and removes its files', async () => {
    const p = await c.getPod('c1');
    const dir = join(w1.dataDir, 'pods', p?.metadata?.uid ?? '');
    assert.ok(existsSync(dir));
    const r = await c.kubectl(['delete', 'pod', 'c1', '--wait=true', '--timeout=20s']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(await c.getPod('c1'), undefined);
    assert.equal(existsSync(dir), false);
    await c.until('the pod port to close', async () => (await get(`http://127.0.0.2:${port1}/view`).then(() => false, () => true)));
  });

  await t.test('a containerPort taken on the node: the pod runs, not Ready, with FailedToServe; once freed it is served and Ready', async () => {
    const port = await freePort('127.0.0.2');
    const squatter = createNetServer();
    await new Promise<void>((resolve) => squatter.listen(port, '127.0.0.2', resolve));
    t.after(() => squatter.close());
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('late', 'w1', port) });
    const waiting = await c.until('late Running, not Ready, its port taken', async () => {
      const p = await c.getPod('late');
      return p?.status?.phase === 'Running' && cond(p, 'Ready') === 'False' ? p : undefined;
    }, 20_000);
    assert.equal(waiting.status?.containerStatuses?.[0]?.ready, false);
    await c.until('a FailedToServe event', async () => {
      const list = await c.admin.json<{ items: Array<{ reason?: string; message?: string; involvedObject?: { name?: string } }> }>('GET', '/api/v1/namespaces/default/events');
      return list.items.some((e) => e.involvedObject?.name === 'late' && e.reason === 'FailedToServe' && /not Ready until then/.test(e.message ?? ''));
    });
    await new Promise<void>((resolve) => squatter.close(() => resolve()));
    await runningPod(c, 'late');
    assert.equal((await counter('127.0.0.2', port)).count, 1, 'the pod serves its port once it is free');
    assert.equal((await c.kubectl(['delete', 'pod', 'late', '--wait=true', '--timeout=20s'])).code, 0);
  });

  await t.test('a snapshot taken with target= goes on to the target, which prepares its restore from that copy and runs it once the data GET answers 304 to it', async () => {
    // Issue 26, "Faster moves": a move by hand, as the checkpoint controller makes it.
    const p1 = await freePort('127.0.0.2');
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('pushed', 'w1', p1) });
    await runningPod(c, 'pushed');
    await counter('127.0.0.2', p1);
    assert.equal((await counter('127.0.0.2', p1)).count, 2);
    await c.admin.json('POST', '/apis/kube32.io/v1/namespaces/default/checkpoints', {
      body: { apiVersion: 'kube32.io/v1', kind: 'Checkpoint', metadata: { name: 'pushed-move' }, spec: { podName: 'pushed', action: 'Move' } },
    });
    const data = '/apis/kube32.io/v1/namespaces/default/checkpoints/pushed-move/data';
    const taken = await c.admin.request('POST', `${data}?node=w1&container=c&leave=frozen&target=w2`);
    const takenBody = (await readBytes(taken.body)).toString();
    assert.equal(taken.status, 200, takenBody);
    const st = (JSON.parse(takenBody) as { status: { snapshotSha256: string; sizeBytes: number } }).status;
    // The data answers its trailer as its ETag; a GET naming it gets 304 and no bytes, another name the bytes.
    const whole = await c.admin.request('GET', data);
    assert.equal((await readBytes(whole.body)).length, st.sizeBytes);
    assert.equal(whole.headers.etag, `"${st.snapshotSha256}"`);
    const same = await c.admin.request('GET', data, { headers: { 'if-none-match': `"${st.snapshotSha256}"` } });
    assert.equal(same.status, 304);
    assert.equal((await readBytes(same.body)).length, 0);
    const other = await c.admin.request('GET', data, { headers: { 'if-none-match': `"${'0'.repeat(64)}"` } });
    assert.equal(other.status, 200);
    assert.equal((await readBytes(other.body)).length, st.sizeBytes);
    // The replacement: the same name on w2, restoring from the Checkpoint.
    await c.admin.json('DELETE', '/api/v1/namespaces/default/pods/pushed?gracePeriodSeconds=0');
    await c.until('pod pushed gone', async () => (await c.getPod('pushed')) === undefined);
    const p2 = await freePort('127.0.0.3');
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('pushed', 'w2', p2, { annotations: { 'kube32.io/restore-from': 'pushed-move' } }) });
    await runningPod(c, 'pushed');
    const s = await counter('127.0.0.3', p2);
    assert.equal(s.count, 3, 'the count carries over');
    assert.equal(s.restored, 1);
    const restored = w2.stderr().split('\n').filter((l) => l.includes('"container restored"')).map((l) => JSON.parse(l) as { checkpoint?: string; data?: string });
    // The copy was restored into a pod thread while it arrived (prepared-restores.ts) and committed at the 304.
    assert.deepEqual(restored.filter((l) => l.checkpoint === 'pushed-move').map((l) => l.data), ['prepared'], 'restored from the copy pushed to w2, prepared as it came');
    await c.admin.json('DELETE', '/api/v1/namespaces/default/pods/pushed?gracePeriodSeconds=0');
    await c.until('pod pushed gone', async () => (await c.getPod('pushed')) === undefined);
  });

  await t.test('MemoryPressure when the free heap is below 24 KiB', async () => {
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('big', 'w2', await freePort('127.0.0.3'), { memory: '950Ki' }) });
    await c.until('w2 MemoryPressure', async () => {
      const n = await c.admin.json<V1Node>('GET', '/api/v1/nodes/w2');
      return n.status?.conditions?.find((x) => x.type === 'MemoryPressure')?.status === 'True';
    });
  });

  await t.test('SIGTERM drains the worker: cordoned, kube32.io/left, its pods evicted, exit 0', async () => {
    // Without the controllers a movable pod's eviction only makes a Checkpoint, and the drain would
    // wait its full 20 s: leave only a pod that the eviction deletes.
    for (const name of ['c1r', 'big', 'bad']) await c.admin.json('DELETE', `/api/v1/namespaces/default/pods/${name}`);
    await c.until('w2 to have stopped its pods', async () => !(await c.getPod('c1r')) && !(await c.getPod('big')) && !(await c.getPod('bad')));
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('stay', 'w2', await freePort('127.0.0.3'), { annotations: { 'kube32.io/migration': 'Never' } }) });
    await runningPod(c, 'stay');
    w2.proc.kill('SIGTERM');
    const code = await w2.exited;
    assert.equal(code, 0, w2.stderr().slice(-2000));
    const n = await c.admin.json<V1Node>('GET', '/api/v1/nodes/w2');
    assert.equal(n.spec?.unschedulable, true);
    assert.equal(n.metadata?.annotations?.['kube32.io/left'], 'true');
    assert.equal(await c.getPod('stay'), undefined);
    assert.match(w2.stdout(), /drained: \d+ evicted/);
  });
});
