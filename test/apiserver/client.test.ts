/**
 * The API server driven by @kubernetes/client-node and raw HTTPS: informers (list, watch,
 * selectors, 410 Expired and relist), the one-write pod replacement, evictions (move, delete,
 * PodDisruptionBudgets), checkpoint data, the module store, the node proxy and pod logs through a
 * fake kubelet that checks the server's token with a TokenReview, garbage collection, node
 * authorization, and the errors every write can answer.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { request as httpsRequest } from 'node:https';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import fc from 'fast-check';
import { AppsV1Api, CoreV1Api, CustomObjectsApi, KubeConfig, makeInformer, type V1Pod } from '@kubernetes/client-node';
import { issueClientCertificate } from '../../src/apiserver/index.ts';
import { encodeSnapshot, type SnapshotState } from '../../src/k32s/index.ts';
import { rawRequest, startApiServer, type TestApiServer } from '../helpers/apiserver.ts';
import { waitFor } from '../helpers/wait.ts';

const until = <T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, ms = 15_000): Promise<T> => waitFor(what, ms, fn, { intervalMs: 25 });

/** A raw HTTPS request with `token` (default: the admin's). */
const raw = (api: TestApiServer, method: string, path: string, body?: unknown, opts: { type?: string; token?: string | null } = {}) => rawRequest(api, method, path, body, opts);

function snapshot(memoryBytes: number, podTimeMs = 1234n): { bytes: Buffer; state: SnapshotState } {
  const memory = new Uint8Array(memoryBytes).fill(7);
  const state: SnapshotState = {
    imageSha256: createHash('sha256').update('module').digest(),
    memory,
    memoryPages: memoryBytes < 65536 ? 1 : memoryBytes / 65536,
    podTimeMs,
    unixTimeMs: 0n,
    globals: [],
    tables: [],
    channels: [],
    events: [],
  };
  return { bytes: Buffer.concat([...encodeSnapshot(state)].map((c) => Buffer.from(c))), state };
}

function nodeClient(api: TestApiServer, node: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(api.nodeKubeconfig(node));
  return kc;
}

const podBody = (name: string, extra: Partial<V1Pod> = {}): V1Pod => ({ metadata: { name, ...extra.metadata }, spec: { containers: [{ name: 'c', image: 'x' }], ...extra.spec } });

test('client-node and raw clients against the API server', { timeout: 240_000 }, async (t) => {
  const api = await startApiServer(t, { args: ['--watch-window', '20', '--checkpoint-data-bytes', '300Ki', '--max-body-bytes', '64Ki'] });
  const core = api.kubeConfig.makeApiClient(CoreV1Api);
  const apps = api.kubeConfig.makeApiClient(AppsV1Api);
  const custom = api.kubeConfig.makeApiClient(CustomObjectsApi);

  await t.test('an informer lists, watches, follows label selectors and relists after 410 Expired', async () => {
    const ns = 'inf';
    await core.createNamespace({ body: { metadata: { name: ns } } });
    await core.createNamespacedPod({ namespace: ns, body: podBody('a', { metadata: { name: 'a', labels: { app: 'x' } } }) });
    const path = `/api/v1/namespaces/${ns}/pods`;
    const informer = makeInformer(api.kubeConfig, path, () => core.listNamespacedPod({ namespace: ns, labelSelector: 'app=x' }), 'app=x');
    const seen: string[] = [];
    informer.on('add', (p) => seen.push(`add ${p.metadata!.name}`));
    informer.on('update', (p) => seen.push(`update ${p.metadata!.name} ${p.metadata!.labels?.v ?? ''}`));
    informer.on('delete', (p) => seen.push(`delete ${p.metadata!.name}`));
    await informer.start();
    t.after(() => informer.stop());
    await until('the listed pod', () => seen.includes('add a'));
    await core.createNamespacedPod({ namespace: ns, body: podBody('b', { metadata: { name: 'b', labels: { app: 'y' } } }) });
    await core.patchNamespacedPod({ namespace: ns, name: 'b', body: [{ op: 'replace', path: '/metadata/labels/app', value: 'x' }] });
    await until('b entering the selection', () => seen.includes('add b'));
    await core.patchNamespacedPod({ namespace: ns, name: 'a', body: [{ op: 'add', path: '/metadata/labels/v', value: '2' }] });
    await until('a updated', () => seen.includes('update a 2'));
    await core.patchNamespacedPod({ namespace: ns, name: 'b', body: [{ op: 'replace', path: '/metadata/labels/app', value: 'z' }] });
    await until('b leaving the selection', () => seen.includes('delete b'));
    // Past the watch window (20 events): a watch from an old resourceVersion gets ERROR 410 and the informer relists.
    const list = await core.listNamespacedPod({ namespace: ns });
    const oldRv = list.metadata!.resourceVersion!;
    for (let i = 0; i < 25; i++) await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: `cm${i}` } } });
    const w = await raw(api, 'GET', `${path}?watch=true&resourceVersion=${oldRv}&timeoutSeconds=1`);
    const first = JSON.parse(w.body.toString().split('\n')[0]!) as { type: string; object: { code: number; reason: string } };
    assert.equal(first.type, 'ERROR');
    assert.equal(first.object.code, 410);
    assert.equal(first.object.reason, 'Expired');
    await core.deleteNamespacedPod({ namespace: ns, name: 'a' });
    await until('a deleted', () => seen.includes('delete a'));
    assert.deepEqual(informer.list().map((p) => p.metadata!.name), []);
  });

  await t.test('watch from resourceVersion 0 replays current objects as ADDED', async () => {
    const w = await raw(api, 'GET', '/api/v1/namespaces?watch=true&resourceVersion=0&timeoutSeconds=1&allowWatchBookmarks=true');
    const events = w.body.toString().trim().split('\n').map((l) => JSON.parse(l) as { type: string; object: { metadata: { name: string } } });
    assert.ok(events.some((e) => e.type === 'ADDED' && e.object.metadata.name === 'default'));
    assert.equal(w.headers['content-type'], 'application/json');
  });

  await t.test('list pages with limit and continue', async () => {
    const page1 = await core.listNamespacedConfigMap({ namespace: 'inf', limit: 10 });
    assert.equal(page1.items.length, 10);
    assert.ok(page1.metadata?._continue);
    const page2 = await core.listNamespacedConfigMap({ namespace: 'inf', limit: 100, _continue: page1.metadata!._continue });
    assert.equal(page2.items.length + 10, 26, 'the 25 made and kube-root-ca.crt, as in every namespace');
    assert.equal(page2.metadata?._continue, undefined);
  });

  await t.test('the one-write replacement: DELETED old uid then ADDED new uid; 409 on a stale uid; 404 when gone', async () => {
    await core.createNode({ body: { metadata: { name: 'r-1' } } });
    const pod = await core.createNamespacedPod({ namespace: 'default', body: podBody('moving', { metadata: { name: 'moving', labels: { app: 'm' }, annotations: { keep: 'me' } }, spec: { nodeName: 'r-1', containers: [{ name: 'c', image: 'x' }] } }) });
    const rv = pod.metadata!.resourceVersion!;
    await core.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name: 'owned-by-moving', ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: 'moving', uid: pod.metadata!.uid! }] } } });
    const fresh = await raw(api, 'POST', '/api/v1/namespaces/default/pods/moving/replace', { metadata: { name: 'moving', uid: pod.metadata!.uid, labels: { app: 'm' }, annotations: { 'kube32.io/restore-from': 'c1' } }, spec: { ...pod.spec, nodeName: 'r-2' } });
    assert.equal(fresh.status, 201, fresh.body.toString());
    const p = fresh.json() as unknown as V1Pod;
    assert.notEqual(p.metadata!.uid, pod.metadata!.uid);
    assert.equal(p.spec!.nodeName, 'r-2');
    assert.equal(p.status!.phase, 'Pending');
    assert.deepEqual(p.status!.conditions!.map((c) => [c.type, c.status]), [['PodScheduled', 'True']]);
    assert.deepEqual(p.metadata!.annotations, { 'kube32.io/restore-from': 'c1' });
    const w = await raw(api, 'GET', `/api/v1/namespaces/default/pods?watch=true&resourceVersion=${rv}&fieldSelector=metadata.name%3Dmoving&timeoutSeconds=1`);
    const events = w.body.toString().trim().split('\n').map((l) => JSON.parse(l) as { type: string; object: V1Pod });
    assert.deepEqual(events.map((e) => [e.type, e.object.metadata!.uid]), [['DELETED', pod.metadata!.uid], ['ADDED', p.metadata!.uid]]);
    const owned = await core.readNamespacedConfigMap({ namespace: 'default', name: 'owned-by-moving' });
    assert.equal(owned.metadata!.ownerReferences![0]!.uid, p.metadata!.uid, 'dependents follow the replacement');
    const stale = await raw(api, 'POST', '/api/v1/namespaces/default/pods/moving/replace', { metadata: { name: 'moving', uid: pod.metadata!.uid }, spec: pod.spec });
    assert.equal(stale.status, 409);
    assert.equal(stale.json().reason, 'Conflict');
    const gone = await raw(api, 'POST', '/api/v1/namespaces/default/pods/nobody/replace', { metadata: { name: 'nobody', uid: 'x' }, spec: pod.spec });
    assert.equal(gone.status, 404);
  });

  await t.test('evictions: running pods move by Checkpoint (idempotent), others are deleted, budgets answer 429', async () => {
    const running = { status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] } };
    const mk = async (name: string, labels: Record<string, string>, extra: Partial<V1Pod['metadata']> = {}) => {
      await core.createNamespacedPod({ namespace: 'default', body: podBody(name, { metadata: { name, labels, ...extra }, spec: { nodeName: 'r-1', containers: [{ name: 'c', image: 'x' }] } }) });
      const r = await raw(api, 'PATCH', `/api/v1/namespaces/default/pods/${name}/status`, running, { type: 'application/merge-patch+json' });
      assert.equal(r.status, 200);
      return (await core.readNamespacedPod({ namespace: 'default', name })).metadata!.uid!;
    };
    // Another Ready node for the move to go to: an eviction that no node could take is refused (429).
    await core.createNode({ body: { metadata: { name: 'ev-target' } } });
    assert.equal((await raw(api, 'PATCH', '/api/v1/nodes/ev-target/status', { status: { conditions: [{ type: 'Ready', status: 'True' }] } }, { type: 'application/merge-patch+json' })).status, 200);
    const uid = await mk('ev-move', { app: 'ev' });
    const eviction = (name: string) => raw(api, 'POST', `/api/v1/namespaces/default/pods/${name}/eviction`, { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name, namespace: 'default' } });
    let r = await eviction('ev-move');
    assert.equal(r.status, 201);
    assert.deepEqual(r.json(), { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success', code: 201 });
    r = await eviction('ev-move');
    assert.equal(r.status, 201);
    const name = `ev-move-evict-${uid.replace(/-/g, '').slice(0, 8)}`;
    const ck = (await custom.getNamespacedCustomObject({ group: 'kube32.io', version: 'v1', namespace: 'default', plural: 'checkpoints', name })) as { spec: unknown; metadata: { labels: Record<string, string> } };
    assert.deepEqual(ck.spec, { podName: 'ev-move', action: 'Move' });
    assert.equal(ck.metadata.labels['kube32.io/trigger'], 'eviction');
    assert.ok(await core.readNamespacedPod({ namespace: 'default', name: 'ev-move' }), 'the pod stays until the controller moves it');
    // Once that move has Failed, an eviction deletes the pod (gracefully: it is bound).
    assert.equal((await raw(api, 'PATCH', `/apis/kube32.io/v1/namespaces/default/checkpoints/${name}/status`, { status: { phase: 'Failed', message: 'no node fits' } }, { type: 'application/merge-patch+json' })).status, 200);
    assert.equal((await eviction('ev-move')).status, 201);
    assert.ok((await core.readNamespacedPod({ namespace: 'default', name: 'ev-move' })).metadata!.deletionTimestamp);
    // A DaemonSet's pod is deleted (gracefully: it is bound).
    await mk('ev-ds', { app: 'ds' }, { ownerReferences: [{ apiVersion: 'apps/v1', kind: 'DaemonSet', name: 'ds', uid: 'u-ds', controller: true }] });
    r = await eviction('ev-ds');
    assert.equal(r.status, 201);
    const ds = await core.readNamespacedPod({ namespace: 'default', name: 'ev-ds' });
    assert.ok(ds.metadata!.deletionTimestamp, 'a bound pod is deleted gracefully');
    // A budget that allows no disruption answers 429.
    await mk('ev-pdb', { app: 'guarded' }, { annotations: { 'kube32.io/migration': 'Never' } });
    await raw(api, 'POST', '/apis/policy/v1/namespaces/default/poddisruptionbudgets', { metadata: { name: 'guard' }, spec: { minAvailable: 1, selector: { matchLabels: { app: 'guarded' } } } });
    r = await eviction('ev-pdb');
    assert.equal(r.status, 429);
    assert.equal(r.json().reason, 'TooManyRequests');
    assert.match(String(r.json().message), /disruption budget/);
    // No disruption controller here: the budget's status was never written for its generation (kube's answer, with Retry-After).
    assert.equal(r.headers['retry-after'], '10');
    assert.deepEqual((r.json().details as { causes: unknown[] }).causes, [{ reason: 'DisruptionBudget', message: 'The disruption budget guard is still being processed by the server.' }]);
    r = await eviction('nobody');
    assert.equal(r.status, 404);
  });

  await t.test('checkpoint data: PUT checks K32S while streaming, sets status, GET answers it; 422, 413, oldest dropped, dropped with the Checkpoint', async () => {
    const base = '/apis/kube32.io/v1/namespaces/default/checkpoints';
    const mk = async (name: string) => {
      const r = await raw(api, 'POST', base, { apiVersion: 'kube32.io/v1', kind: 'Checkpoint', metadata: { name }, spec: { podName: 'p' }, status: { phase: 'Saved' } });
      assert.equal(r.status, 201, r.body.toString());
      assert.equal((r.json().status as unknown) ?? null, null, 'status stays out of creates');
      assert.equal((r.json().spec as { action: string }).action, 'Save');
    };
    await mk('d1');
    const { bytes } = snapshot(131072, 777n);
    let r = await raw(api, 'PUT', `${base}/d1/data`, bytes, { type: 'application/octet-stream' });
    assert.equal(r.status, 200, r.body.toString());
    const st = r.json().status as Record<string, unknown>;
    assert.equal(st.sizeBytes, bytes.length);
    assert.equal(st.podTimeMs, 777);
    assert.equal(st.snapshotSha256, createHash('sha256').update(bytes.subarray(0, bytes.length - 32)).digest('hex'));
    assert.equal(st.imageSha256, createHash('sha256').update('module').digest('hex'));
    r = await raw(api, 'GET', `${base}/d1/data`);
    assert.equal(r.status, 200);
    assert.ok(r.body.equals(bytes));
    assert.equal(r.headers['x-kube32-pod-time-ms'], '777');
    // Damaged: wrong trailer, wrong magic.
    const damaged = Buffer.from(bytes);
    damaged[200] ^= 1;
    await mk('d2');
    r = await raw(api, 'PUT', `${base}/d2/data`, damaged, { type: 'application/octet-stream' });
    assert.equal(r.status, 422);
    assert.equal(r.json().reason, 'Invalid');
    assert.match(String(r.json().message), /trailer/);
    const notK32s = Buffer.from(bytes);
    notK32s.write('NOPE', 0);
    r = await raw(api, 'PUT', `${base}/d2/data`, notK32s, { type: 'application/octet-stream' });
    assert.equal(r.status, 422);
    r = await raw(api, 'GET', `${base}/d2/data`);
    assert.equal(r.status, 404, 'no data while none was stored');
    // Larger than the whole space (300 KiB): 413.
    r = await raw(api, 'PUT', `${base}/d2/data`, snapshot(7 * 65536).bytes, { type: 'application/octet-stream' });
    assert.equal(r.status, 413);
    // d2 and d3 fill the space: the oldest (d1) is dropped.
    await mk('d3');
    assert.equal((await raw(api, 'PUT', `${base}/d2/data`, snapshot(131072).bytes, { type: 'application/octet-stream' })).status, 200);
    assert.equal((await raw(api, 'PUT', `${base}/d3/data`, snapshot(131072).bytes, { type: 'application/octet-stream' })).status, 200);
    assert.equal((await raw(api, 'GET', `${base}/d1/data`)).status, 404, 'the oldest data was dropped');
    assert.equal((await raw(api, 'GET', `${base}/d2/data`)).status, 200);
    // Dropped with its Checkpoint; a new Checkpoint of the same name has none.
    await custom.deleteNamespacedCustomObject({ group: 'kube32.io', version: 'v1', namespace: 'default', plural: 'checkpoints', name: 'd2' });
    await mk('d2');
    assert.equal((await raw(api, 'GET', `${base}/d2/data`)).status, 404);
    // /status writes only status.
    r = await raw(api, 'PATCH', `${base}/d3/status`, { spec: { podName: 'other' }, status: { phase: 'Saved' } }, { type: 'application/merge-patch+json' });
    assert.equal(r.status, 200);
    assert.equal((r.json().spec as { podName: string }).podName, 'p');
    assert.equal((r.json().status as { phase: string }).phase, 'Saved');
    assert.equal((r.json().status as { sizeBytes: number }).sizeBytes > 0, true);
    // Data has a Secret's rules: a node reads it only for a pod bound to it that restores from it, and never writes it.
    const nodeToken = nodeClient(api, 'r-1').getCurrentUser()!.token;
    r = await raw(api, 'PUT', `${base}/d3/data`, snapshot(10).bytes, { type: 'application/octet-stream', token: nodeToken });
    assert.equal(r.status, 403);
    assert.equal((await raw(api, 'GET', `${base}/d3/data`, undefined, { token: nodeToken })).status, 403);
    await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name: 'restoring', annotations: { 'kube32.io/restore-from': 'd3' } }, spec: { nodeName: 'r-1', containers: [{ name: 'c', image: 'x' }] } } });
    assert.equal((await raw(api, 'GET', `${base}/d3/data`, undefined, { token: nodeToken })).status, 200);
    assert.equal((await raw(api, 'GET', `${base}/d3/data`, undefined, { token: nodeClient(api, 'r-2').getCurrentUser()!.token })).status, 403);
  });

  await t.test('the module store: PUT data makes the Module, GET data and blobs by digest, wasm:// images resolve', async () => {
    // (module (func (export "_start"))): the least module a pod can run (pushes are loaded as pods are)
    const wasm = Buffer.from('0061736d0100000001040160000003020100070a01065f737461727400000a040102000b', 'hex');
    const sha = createHash('sha256').update(wasm).digest('hex');
    let r = await raw(api, 'PUT', '/apis/kube32.io/v1/modules/echo/data', wasm, { type: 'application/octet-stream' });
    assert.equal(r.status, 201, r.body.toString());
    assert.deepEqual(r.json().spec, { sha256: sha, sizeBytes: wasm.length });
    r = await raw(api, 'PUT', '/apis/kube32.io/v1/modules/echo/data', wasm, { type: 'application/octet-stream' });
    assert.equal(r.status, 200);
    r = await raw(api, 'GET', '/apis/kube32.io/v1/modules/echo/data');
    assert.ok(r.body.equals(wasm));
    r = await raw(api, 'GET', `/apis/kube32.io/v1/blobs/${sha}`);
    assert.ok(r.body.equals(wasm));
    r = await raw(api, 'GET', `/apis/kube32.io/v1/blobs/${'0'.repeat(64)}`);
    assert.equal(r.status, 404);
    assert.equal(r.json().kind, 'Status');
    r = await raw(api, 'PUT', '/apis/kube32.io/v1/modules/bad/data', Buffer.from('not wasm'), { type: 'application/octet-stream' });
    assert.equal(r.status, 422);
    const pod = await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name: 'wasmpod' }, spec: { containers: [{ name: 'c', image: 'wasm://echo' }] } } });
    assert.equal(pod.metadata!.annotations!['kube32.io/image-sha256'], sha);
    const byDigest = await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name: 'digestpod' }, spec: { containers: [{ name: 'c', image: `kube32.io/wasm-sha256:${sha}` }] } } });
    assert.equal(byDigest.metadata!.annotations!['kube32.io/image-sha256'], sha);
    // A bare module name (what `kubectl run --image=echo` sends) resolves as wasm://echo; an unknown one is left to the kubelet.
    const bare = await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name: 'barepod' }, spec: { containers: [{ name: 'c', image: 'echo' }] } } });
    assert.equal(bare.metadata!.annotations?.['kube32.io/image-sha256'], sha);
    const unknown = await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name: 'unknownpod' }, spec: { containers: [{ name: 'c', image: 'nginx' }] } } });
    assert.equal(unknown.metadata!.annotations?.['kube32.io/image-sha256'], undefined);
    r = await raw(api, 'POST', '/api/v1/namespaces/default/pods', { metadata: { name: 'nomod' }, spec: { containers: [{ name: 'c', image: 'wasm://missing' }] } });
    assert.equal(r.status, 422);
    assert.match(String(r.json().message), /no module "missing"/);
  });

  await t.test('the node proxy and pod logs reach the kubelet, which checks the server with a TokenReview', async () => {
    const nodeKc = nodeClient(api, 'k-1');
    const reviews: unknown[] = [];
    const kubelet = createServer((req, res) => {
      void (async () => {
        const token = String(req.headers.authorization ?? '').replace(/^Bearer /, '');
        const review = await raw(api, 'POST', '/apis/authentication.k8s.io/v1/tokenreviews', { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token } }, { token: nodeKc.getCurrentUser()!.token });
        const status = review.json().status as { authenticated: boolean; user?: { username: string } };
        reviews.push(status);
        if (!status.authenticated || status.user?.username !== 'system:kube-apiserver') {
          res.writeHead(401).end();
          return;
        }
        if (req.url!.startsWith('/containerLogs/default/logpod/c')) {
          res.writeHead(200, { 'Content-Type': 'text/plain' });
          res.write(`line1 ${req.url}\n`);
          setTimeout(() => res.end('line2\n'), 50);
          return;
        }
        const chunks: Buffer[] = [];
        for await (const c of req) chunks.push(c as Buffer);
        res.writeHead(207, { 'Content-Type': 'application/octet-stream', 'X-Kube32-Pod-Time-Ms': '5' });
        res.end(Buffer.concat([Buffer.from(`${req.method} ${req.url} `), ...chunks]));
      })();
    });
    await new Promise<void>((r) => kubelet.listen(0, '127.0.0.1', r));
    t.after(() => kubelet.close());
    const port = (kubelet.address() as AddressInfo).port;
    const nodeCore = nodeKc.makeApiClient(CoreV1Api);
    await nodeCore.createNode({ body: { metadata: { name: 'k-1' } } });
    const st = await raw(api, 'PATCH', '/api/v1/nodes/k-1/status', { status: { addresses: [{ type: 'InternalIP', address: '127.0.0.1' }], daemonEndpoints: { kubeletEndpoint: { Port: port } } } }, { type: 'application/merge-patch+json', token: nodeKc.getCurrentUser()!.token });
    assert.equal(st.status, 200, st.body.toString());
    const r = await raw(api, 'POST', '/api/v1/nodes/k-1/proxy/checkpoint/default/p/c?leave=frozen&timeoutMs=100', Buffer.from('body!'), { type: 'application/octet-stream' });
    assert.equal(r.status, 207);
    assert.equal(r.headers['x-kube32-pod-time-ms'], '5');
    assert.equal(r.body.toString(), 'POST /checkpoint/default/p/c?leave=frozen&timeoutMs=100 body!');
    await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name: 'logpod' }, spec: { nodeName: 'k-1', containers: [{ name: 'c', image: 'x' }] } } });
    const logs = await api.kubectl(['logs', 'logpod', '-f', '--tail=3']);
    assert.equal(logs.code, 0, logs.stderr);
    assert.equal(logs.stdout, 'line1 /containerLogs/default/logpod/c?follow=true&tailLines=3\nline2\n');
    assert.ok(reviews.length >= 2);
    // The service proxy goes to an address of the service's Endpoints (here the same server, which answers 401 without the server's token).
    await core.createNamespacedService({ namespace: 'default', body: { metadata: { name: 'web' }, spec: { ports: [{ name: 'http', port: 80 }] } } });
    await core.createNamespacedEndpoints({ namespace: 'default', body: { metadata: { name: 'web' }, subsets: [{ addresses: [{ ip: '127.0.0.1' }], ports: [{ name: 'http', port }] }] } });
    assert.equal((await raw(api, 'GET', '/api/v1/namespaces/default/services/web:http/proxy/anything')).status, 401);
    assert.equal((await raw(api, 'GET', '/api/v1/namespaces/default/services/nothere/proxy/')).status, 404);
    // A node proxy to a node without a kubelet endpoint: 503.
    const none = await raw(api, 'GET', '/api/v1/nodes/r-1/proxy/healthz');
    assert.equal(none.status, 503);
    // Nodes may not use the node proxy; a bad token is not a user.
    assert.equal((await raw(api, 'GET', '/api/v1/nodes/k-1/proxy/healthz', undefined, { token: nodeKc.getCurrentUser()!.token })).status, 403);
    assert.equal((await raw(api, 'GET', '/api/v1/pods', undefined, { token: 'k32.bogus.token' })).status, 401);
    assert.equal((await raw(api, 'GET', '/api/v1/pods', undefined, { token: null })).status, 401);
  });

  await t.test('a node may change only its own Node, Lease and its pods\' status', async () => {
    const kc = nodeClient(api, 'k-1');
    const token = kc.getCurrentUser()!.token!;
    const patch = (path: string, body: unknown) => raw(api, 'PATCH', path, body, { type: 'application/merge-patch+json', token });
    assert.equal((await patch('/api/v1/nodes/k-1', { metadata: { annotations: { 'kube32.io/left': 'true' } } })).status, 200);
    const other = await patch('/api/v1/nodes/r-1', { metadata: { labels: { a: 'b' } } });
    assert.equal(other.status, 403);
    assert.equal(other.json().reason, 'Forbidden');
    assert.equal((await raw(api, 'POST', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases', { metadata: { name: 'k-1' }, spec: { holderIdentity: 'k-1', leaseDurationSeconds: 40 } }, { token })).status, 201);
    assert.equal((await raw(api, 'POST', '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases', { metadata: { name: 'r-1' }, spec: {} }, { token })).status, 403);
    assert.equal((await patch('/api/v1/namespaces/default/pods/logpod/status', { status: { phase: 'Running' } })).status, 200);
    assert.equal((await patch('/api/v1/namespaces/default/pods/ev-move/status', { status: { phase: 'Failed' } })).status, 403);
    assert.equal((await patch('/api/v1/namespaces/default/pods/logpod', { metadata: { labels: { x: 'y' } } })).status, 403);
    const del = await raw(api, 'DELETE', '/api/v1/namespaces/default/pods/logpod', { gracePeriodSeconds: 0 }, { token });
    assert.equal(del.status, 200);
  });

  await t.test('garbage collection: a Deployment takes its ReplicaSets and pods; Orphan keeps them', async () => {
    const tpl = { metadata: { labels: { app: 'gc' } }, spec: { containers: [{ name: 'c', image: 'x' }] } };
    const mkChain = async (name: string) => {
      const d = await apps.createNamespacedDeployment({ namespace: 'default', body: { metadata: { name }, spec: { selector: { matchLabels: { app: 'gc' } }, template: tpl } } });
      assert.equal(d.spec!.replicas, 1);
      assert.equal(d.spec!.strategy!.type, 'RollingUpdate');
      const own = (kind: string, n: string, uid: string) => [{ apiVersion: 'apps/v1', kind, name: n, uid, controller: true, blockOwnerDeletion: true }];
      const rs = await apps.createNamespacedReplicaSet({ namespace: 'default', body: { metadata: { name: `${name}-rs`, ownerReferences: own('Deployment', name, d.metadata!.uid!) }, spec: { replicas: 1, selector: { matchLabels: { app: 'gc' } }, template: tpl } } });
      await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name: `${name}-pod`, labels: { app: 'gc' }, ownerReferences: own('ReplicaSet', rs.metadata!.name!, rs.metadata!.uid!) }, spec: tpl.spec } });
    };
    await mkChain('gc1');
    await apps.deleteNamespacedDeployment({ namespace: 'default', name: 'gc1' });
    await until('the pod collected', async () => !(await core.listNamespacedPod({ namespace: 'default' })).items.some((p) => p.metadata!.name === 'gc1-pod'));
    assert.equal((await apps.listNamespacedReplicaSet({ namespace: 'default' })).items.length, 0);
    await mkChain('gc2');
    await apps.deleteNamespacedDeployment({ namespace: 'default', name: 'gc2', propagationPolicy: 'Orphan' });
    await until('the deployment gone', async () => (await apps.listNamespacedDeployment({ namespace: 'default' })).items.length === 0);
    const rs = await apps.readNamespacedReplicaSet({ namespace: 'default', name: 'gc2-rs' });
    assert.equal(rs.metadata!.ownerReferences, undefined);
    await apps.deleteNamespacedReplicaSet({ namespace: 'default', name: 'gc2-rs', propagationPolicy: 'Foreground' });
    await until('the foreground deletion done', async () => (await apps.listNamespacedReplicaSet({ namespace: 'default' })).items.length === 0);
    assert.ok(!(await core.listNamespacedPod({ namespace: 'default' })).items.some((p) => p.metadata!.name === 'gc2-pod'));
  });

  await t.test('scale subresource, dryRun, namespaces deleted with their content', async () => {
    await apps.createNamespacedDeployment({ namespace: 'default', body: { metadata: { name: 'sc' }, spec: { selector: { matchLabels: { a: 'b' } }, template: { metadata: { labels: { a: 'b' } }, spec: { containers: [{ name: 'c', image: 'x' }] } } } } });
    const r = await api.kubectl(['scale', 'deployment', 'sc', '--replicas=3']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal((await apps.readNamespacedDeployment({ namespace: 'default', name: 'sc' })).spec!.replicas, 3);
    const cmFile = join(api.dataDir, 'dry.yaml');
    writeFileSync(cmFile, 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dry}\ndata: {a: b}\n');
    const dry = await api.kubectl(['create', '-f', cmFile, '--dry-run=server']);
    assert.equal(dry.code, 0, dry.stderr);
    assert.equal((await raw(api, 'GET', '/api/v1/namespaces/default/configmaps/dry')).status, 404);
    await core.createNamespace({ body: { metadata: { name: 'doomed' } } });
    await core.createNamespacedConfigMap({ namespace: 'doomed', body: { metadata: { name: 'c' } } });
    await core.deleteNamespace({ name: 'doomed' });
    await until('the namespace gone', async () => (await raw(api, 'GET', '/api/v1/namespaces/doomed')).status === 404);
    assert.equal((await raw(api, 'DELETE', '/api/v1/namespaces/default')).status, 403);
  });

  await t.test('errors: Conflict, Invalid with causes, BadRequest, 413, 415, NotFound namespace', async () => {
    const cm = await core.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name: 'cc' }, data: { a: '1' } } });
    await core.replaceNamespacedConfigMap({ namespace: 'default', name: 'cc', body: { ...cm, data: { a: '2' } } });
    let r = await raw(api, 'PUT', '/api/v1/namespaces/default/configmaps/cc', { ...cm, data: { a: '3' } });
    assert.equal(r.status, 409);
    assert.equal(r.json().reason, 'Conflict');
    r = await raw(api, 'POST', '/api/v1/namespaces/default/pods', { metadata: { name: 'Bad_Name' }, spec: { containers: [{ name: 'c' }] } });
    assert.equal(r.status, 422);
    const causes = (r.json().details as { causes: { field: string }[] }).causes.map((c) => c.field);
    assert.deepEqual(causes, ['metadata.name', 'spec.containers[0].image']);
    r = await raw(api, 'POST', '/api/v1/namespaces/default/configmaps', '{"metadata": {');
    assert.equal(r.status, 400);
    assert.equal(r.json().reason, 'BadRequest');
    r = await raw(api, 'POST', '/api/v1/namespaces/default/configmaps?fieldValidation=Strict', { metadata: { name: 'u' }, bogus: 1 });
    assert.equal(r.status, 400);
    r = await raw(api, 'POST', '/api/v1/namespaces/default/configmaps?fieldValidation=Warn', { metadata: { name: 'u' }, bogus: 1 });
    assert.equal(r.status, 201);
    assert.match(String(r.headers.warning), /unknown field \\"bogus\\"/);
    r = await raw(api, 'POST', '/api/v1/namespaces/default/configmaps', { metadata: { name: 'big' }, data: { a: 'x'.repeat(70_000) } });
    assert.equal(r.status, 413);
    r = await raw(api, 'PATCH', '/api/v1/namespaces/default/configmaps/cc', 'a: b', { type: 'text/plain' });
    assert.equal(r.status, 415);
    r = await raw(api, 'POST', '/api/v1/namespaces/nowhere/configmaps', { metadata: { name: 'x' } });
    assert.equal(r.status, 404);
    assert.equal(r.json().message, 'namespaces "nowhere" not found');
    r = await raw(api, 'GET', '/api/v1/pods?fieldSelector=spec.bogus%3Dx');
    assert.equal(r.status, 400);
    r = await raw(api, 'GET', '/api/v1/pods?fieldSelector=spec.nodeName%3Dk-1,status.phase!%3DFailed');
    assert.equal(r.status, 200);
  });

  await t.test('client certificates the cluster CA signed authenticate as CN with groups O', async () => {
    const { certPem, keyPem } = await issueClientCertificate(api.dataDir, { name: 'system:node:k-1', groups: ['system:nodes'] });
    const ca = Buffer.from(api.kubeConfig.getCurrentCluster()!.caData!, 'base64');
    const u = new URL(api.url);
    const get = (path: string, method = 'GET', body?: string) =>
      new Promise<number>((resolve, reject) => {
        const req = httpsRequest({ host: u.hostname, port: u.port, path, method, ca, cert: certPem, key: keyPem, headers: body ? { 'Content-Type': 'application/merge-patch+json' } : {} }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        });
        req.on('error', reject);
        req.end(body);
      });
    assert.equal(await get('/api/v1/nodes'), 200);
    assert.equal(await get('/api/v1/nodes/k-1', 'PATCH', '{"metadata":{"labels":{"cert":"yes"}}}'), 200);
    assert.equal(await get('/api/v1/nodes/r-1', 'PATCH', '{"metadata":{"labels":{"cert":"yes"}}}'), 403);
  });

  await t.test('bad input never crashes the server and never half-writes', async () => {
    const cases: [string, string, unknown][] = [
      ['POST', '/api/v1/namespaces/default/pods', { metadata: { name: 5 }, spec: { containers: [{ name: 'c', image: 'x' }] } }],
      ['POST', '/api/v1/namespaces/default/pods', { metadata: { name: 'bad1', ownerReferences: 5 }, spec: { containers: [{ name: 'c', image: 'x' }] } }],
      ['POST', '/api/v1/namespaces/default/pods', { metadata: { name: 'bad2' }, spec: { containers: [5, null, { name: 'c', image: 'x', ports: [5] }] } }],
      ['POST', '/api/v1/namespaces/default/pods', { metadata: { name: 'bad3' }, spec: { containers: [{ name: 'c', image: 'x' }], tolerations: 5 } }],
      ['POST', '/apis/policy/v1/namespaces/default/poddisruptionbudgets', { metadata: { name: 'bad4' }, spec: { selector: 5 } }],
      ['POST', '/apis/kube32.io/v1/namespaces/default/checkpoints', { metadata: { name: 'bad5' }, spec: { podName: 'p', action: 'Move', target: 5 } }],
      ['POST', '/api/v1/nodes', { metadata: { name: 'bad6' }, spec: 5 }],
      ['POST', '/api/v1/namespaces/default/pods', { metadata: { name: 'bad7' }, spec: { containers: [{ name: 'c', image: 'x', resources: { limits: { memory: 'lots' } } }] } }],
      ['POST', '/apis/kube32.io/v1/namespaces/default/checkpoints', { metadata: { name: 'bad8' }, spec: { podName: 'Not A Pod' } }],
    ];
    for (const [method, path, body] of cases) {
      const r = await raw(api, method, path, body);
      assert.equal(r.status, 422, `${method} ${path} ${JSON.stringify(body)}: ${r.body.toString()}`);
    }
    for (let i = 1; i <= 6; i++) assert.equal((await raw(api, 'GET', `/api/v1/namespaces/default/pods/bad${i}`)).status, 404);
    // Random JSON as a pod body: always a 4xx or a 201, never a 5xx.
    await fc.assert(
      fc.asyncProperty(fc.jsonValue({ maxDepth: 4 }), fc.jsonValue({ maxDepth: 3 }), async (spec, meta) => {
        const r = await raw(api, 'POST', '/api/v1/namespaces/fuzz/pods?dryRun=All', { metadata: { name: 'f', ...(typeof meta === 'object' && meta && !Array.isArray(meta) ? meta : {}) }, spec });
        return r.status < 500;
      }),
      { numRuns: 150 },
    );
    await core.createNamespace({ body: { metadata: { name: 'fuzz' } } });
    await fc.assert(
      fc.asyncProperty(fc.jsonValue({ maxDepth: 4 }), async (spec) => {
        const r = await raw(api, 'POST', '/api/v1/namespaces/fuzz/pods', { metadata: { generateName: 'f-' }, spec: { containers: [{ name: 'c', image: 'x' }], ...(typeof spec === 'object' && spec && !Array.isArray(spec) ? spec : {}) } });
        return r.status < 500;
      }),
      { numRuns: 150 },
    );
    assert.equal((await raw(api, 'GET', '/healthz', undefined, { token: null })).status, 200);
  });

  await t.test('events.k8s.io/v1 Events are core Events seen through another schema', async () => {
    const base = '/apis/events.k8s.io/v1/namespaces/default/events';
    const now = new Date().toISOString().replace('Z', '000Z');
    let r = await raw(api, 'POST', base, { apiVersion: 'events.k8s.io/v1', kind: 'Event', metadata: { name: 'new.1' }, eventTime: now, reportingController: 'kube32.io/checkpoint', reportingInstance: 'cp-1', action: 'Move', reason: 'Moved', regarding: { kind: 'Pod', name: 'web', namespace: 'default' }, note: 'moved in 12 ms', type: 'Normal', deprecatedLastTimestamp: new Date(Date.now() + 3600_000).toISOString().replace(/\.\d+Z$/, 'Z') });
    assert.equal(r.status, 201, r.body.toString());
    assert.equal(r.json().note, 'moved in 12 ms');
    const core1 = await core.readNamespacedEvent({ namespace: 'default', name: 'new.1' });
    assert.equal(core1.message, 'moved in 12 ms');
    assert.equal(core1.involvedObject.name, 'web');
    assert.equal(core1.reportingComponent, 'kube32.io/checkpoint');
    r = await raw(api, 'PATCH', `${base}/new.1`, { note: 'patched' }, { type: 'application/merge-patch+json' });
    assert.equal(r.status, 200, r.body.toString());
    assert.equal((await core.readNamespacedEvent({ namespace: 'default', name: 'new.1' })).message, 'patched');
    r = await raw(api, 'GET', `${base}?fieldSelector=involvedObject.name%3Dweb`);
    assert.deepEqual((r.json().items as { note: string; regarding: { name: string } }[]).map((e) => [e.note, e.regarding.name]), [['patched', 'web']]);
    const w = await raw(api, 'GET', `${base}?watch=true&resourceVersion=0&timeoutSeconds=1&fieldSelector=metadata.name%3Dnew.1`);
    const ev = JSON.parse(w.body.toString().split('\n')[0]!) as { object: { apiVersion: string; note: string } };
    assert.deepEqual([ev.object.apiVersion, ev.object.note], ['events.k8s.io/v1', 'patched']);
    assert.equal((await raw(api, 'DELETE', `${base}/new.1`)).status, 200);
    assert.equal((await raw(api, 'GET', '/api/v1/namespaces/default/events/new.1')).status, 404);
  });

  await t.test('health, metrics and version', async () => {
    assert.equal((await raw(api, 'GET', '/healthz', undefined, { token: null })).body.toString(), 'ok');
    assert.equal((await raw(api, 'GET', '/readyz', undefined, { token: null })).status, 200);
    const m = await raw(api, 'GET', '/metrics');
    assert.match(m.body.toString(), /apiserver_request_total\{verb="create",resource="pods"/);
    assert.match(m.body.toString(), /^apiserver_storage_objects\{resource="namespaces"\} \d+$/m);
    assert.match(m.body.toString(), /^kube32_checkpoint_data_capacity_bytes 307200$/m);
    const v = (await raw(api, 'GET', '/version', undefined, { token: null })).json();
    assert.deepEqual([v.major, v.minor], ['1', '32']);
  });
});
