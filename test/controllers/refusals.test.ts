/**
 * End to end: what keeps a pod from moving, and what a refused move leaves behind (seed "What keeps a pod
 * from moving", "Drain and evictions"): the spec's blockers, the node's blockers, a Save, no target, and
 * drains of pods that cannot move. A real API server, the controllers and two real kube32-sim workers.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { type Checkpoint, readText } from '../../src/api/index.ts';
import { type ControllersCluster, count, counterPod, runPod, startControllersCluster } from './cluster.ts';

async function finished(c: ControllersCluster, name: string) {
  return c.until(`checkpoint ${name} to finish`, async () => {
    const ck = await c.getCheckpoint(name);
    return ck?.status?.phase === 'Failed' || ck?.status?.phase === 'Completed' || ck?.status?.phase === 'Saved' ? ck : undefined;
  }, 30_000);
}

test('refused moves, a Save, and drains of pods that cannot move', { timeout: 240_000 }, async (t) => {
  const c = await startControllersCluster(t, { freezeTimeoutMs: 1000 });
  await c.startWorker('w1');
  await c.startWorker('w2');

  await t.test('every spec blocker is listed at once; the pod keeps running where it is', async () => {
    const p = counterPod('gadget', 18101, { annotations: { 'kube32.io/migration': 'Never' } });
    p.spec!.containers[0]!.securityContext = { capabilities: { add: ['DISPLAY'] } };
    const pod = await runPod(c, p);
    await c.createCheckpoint({ metadata: { name: 'gadget-move', namespace: 'default' }, spec: { podName: 'gadget', action: 'Move' } });
    const ck = await finished(c, 'gadget-move');
    assert.equal(ck.status?.phase, 'Failed');
    assert.deepEqual(ck.status?.blockers, ['grant capability DISPLAY', 'annotation kube32.io/migration: Never']);
    const after = (await c.getPod('gadget'))!;
    assert.equal(after.metadata?.uid, pod.metadata?.uid);
    assert.equal(after.spec?.nodeName, pod.spec?.nodeName);
    // The event follows the status write that decided it.
    const failed = await c.until('the MoveFailed event', async () => (await c.events()).find((e) => e.reason === 'MoveFailed' && e.involvedObject?.name === 'gadget'));
    assert.match(failed.message ?? '', /grant capability DISPLAY; annotation kube32.io\/migration: Never/);
  });

  await t.test('every row of the spec table at once, before anything freezes', async () => {
    const p = counterPod('everything', 18105, { annotations: { 'kube32.io/migration': 'Never', 'kube32.io/i2c-device': 'bme280' } });
    const ctr = p.spec!.containers[0]!;
    ctr.resources = { limits: { memory: '64Ki', 'hardware.kube32.io/gpio': '1', 'hardware.kube32.io/ipc': '1', 'esp32.io/rmt': '1' } };
    ctr.securityContext = { capabilities: { add: ['SPEAKER', 'CHIP_TEMP'] } };
    p.spec!.volumes = [
      { name: 'data', persistentVolumeClaim: { claimName: 'logs' } },
      { name: 'card', csi: { driver: 'kube32.io/sd' } },
    ];
    p.spec!.nodeName = 'w1';
    await c.rest.json({ method: 'POST', path: '/api/v1/namespaces/default/pods', body: p });
    await c.createCheckpoint({ metadata: { name: 'everything-move', namespace: 'default' }, spec: { podName: 'everything', action: 'Move' } });
    const ck = await finished(c, 'everything-move');
    assert.equal(ck.status?.phase, 'Failed');
    assert.deepEqual(ck.status?.blockers, [
      'grant hardware.kube32.io/gpio',
      'grant esp32.io/rmt',
      'grant capability SPEAKER',
      'grant capability CHIP_TEMP',
      'grant kube32.io/i2c-device',
      'volume claim logs on node storage',
      'volume claim card on node storage',
      'annotation kube32.io/migration: Never',
    ]);
    await c.rest.json({ method: 'DELETE', path: '/api/v1/namespaces/default/pods/everything?gracePeriodSeconds=0' });
  });

  await t.test('a call that outlasts the freeze timeout (504) fails the move; the pod keeps running', async () => {
    const pod = await runPod(c, counterPod('spinner', 18106));
    // The pod logs "request" as each call starts: the Checkpoint is created once the spin call runs
    // (created at once, its freeze could reach the pod first: the move would go through, the call 503).
    const logLines = async () => (await readText((await c.rest.request({ method: 'GET', path: '/api/v1/namespaces/default/pods/spinner/log' })).body)).split('\n').length;
    const before = await logLines();
    const spin = c.podGet(pod, 18106, '/spin'); // 3 s of pod time
    await c.until('the spin call to run', async () => (await logLines()) > before);
    await c.createCheckpoint({ metadata: { name: 'spinner-move', namespace: 'default' }, spec: { podName: 'spinner', action: 'Move' } });
    const ck = await finished(c, 'spinner-move');
    assert.equal(ck.status?.phase, 'Failed');
    assert.deepEqual(ck.status?.blockers, ['call k32_handle still running after 1000 ms']);
    assert.equal((await spin).status, 200, 'the call completes');
    const after = (await c.getPod('spinner'))!;
    assert.equal(after.metadata?.uid, pod.metadata?.uid);
    assert.equal((await count(c, after, 18106)).count, 1);
  });

  await t.test("the node's blocker (an open file) fails the move; the pod keeps running and counting", async () => {
    const pod = await runPod(c, counterPod('filer', 18102));
    assert.equal((await count(c, pod, 18102)).count, 1);
    const opened = await c.podGet(pod, 18102, '/open');
    assert.equal(opened.status, 200);
    await c.createCheckpoint({ metadata: { name: 'filer-move', namespace: 'default' }, spec: { podName: 'filer', action: 'Move' } });
    const ck = await finished(c, 'filer-move');
    assert.equal(ck.status?.phase, 'Failed');
    assert.ok(ck.status?.blockers?.some((b) => /^open file .*f\.txt \(descriptor \d+\)$/.test(b)), `blockers: ${ck.status?.blockers}`);
    const after = (await c.getPod('filer'))!;
    assert.equal(after.metadata?.uid, pod.metadata?.uid);
    const n = await count(c, after, 18102);
    assert.equal(n.count, 2, 'still running and counting');
  });

  await t.test('a Save stores the snapshot and leaves the pod running', async () => {
    const pod = await runPod(c, counterPod('saver', 18103));
    await count(c, pod, 18103);
    await c.createCheckpoint({ metadata: { name: 'saver-save', namespace: 'default' }, spec: { podName: 'saver' } });
    const ck = await finished(c, 'saver-save');
    assert.equal(ck.status?.phase, 'Saved');
    assert.ok((ck.status?.sizeBytes ?? 0) > 0);
    assert.equal(ck.status?.nodeName, pod.spec?.nodeName);
    assert.match(ck.status?.snapshotSha256 ?? '', /^[0-9a-f]{64}$/);
    const after = (await c.getPod('saver'))!;
    assert.equal(after.metadata?.uid, pod.metadata?.uid);
    assert.equal((await count(c, after, 18103)).count, 2);
    await c.until('the Checkpointed event', async () => (await c.events()).some((e) => e.reason === 'Checkpointed' && e.involvedObject?.name === 'saver'));
  });

  await t.test("a move to the pod's own node fails with the scheduler's reason", async () => {
    const pod = (await c.getPod('saver'))!;
    await c.createCheckpoint({ metadata: { name: 'saver-self', namespace: 'default' }, spec: { podName: 'saver', action: 'Move', target: { nodeName: pod.spec!.nodeName! } } });
    const ck = await finished(c, 'saver-self');
    assert.equal(ck.status?.phase, 'Failed');
    assert.match(ck.status?.message ?? '', /own node/);
  });

  await t.test('an eviction whose move the node refuses deletes the pod, as an eviction does', async () => {
    const pod = await runPod(c, counterPod('stuck', 18108, { nodeName: 'w2' }));
    assert.equal((await c.podGet(pod, 18108, '/open')).status, 200);
    const res = await c.rest.request({
      method: 'POST',
      path: '/api/v1/namespaces/default/pods/stuck/eviction',
      body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name: 'stuck', namespace: 'default' } },
    });
    res.body.resume();
    assert.ok(res.status === 201 || res.status === 200, `eviction answered ${res.status}`);
    await c.until('the pod to be deleted', async () => (await c.getPod('stuck')) === undefined || (await c.getPod('stuck'))?.metadata?.uid !== pod.metadata?.uid, 30_000);
    // The pod is deleted before the Checkpoint's Failed status is written (failCheckpoint): wait for it.
    const ck = await c.until('the eviction Checkpoint of stuck to finish', async () => {
      const list = await c.rest.json<{ items: Checkpoint[] }>({ method: 'GET', path: '/apis/kube32.io/v1/namespaces/default/checkpoints?labelSelector=kube32.io%2Ftrigger%3Deviction' });
      const x = list.items.find((y) => y.spec.podName === 'stuck');
      return x?.status?.phase === 'Failed' || x?.status?.phase === 'Completed' ? x : undefined;
    });
    assert.equal(ck?.status?.phase, 'Failed');
    assert.ok(ck?.status?.blockers?.some((b) => b.startsWith('open file ')), JSON.stringify(ck?.status));
  });

  await t.test('a DaemonSet runs one pod on each Ready node', async () => {
    const template = counterPod('agent', 18107, { labels: { app: 'agent' } });
    await c.rest.json({
      method: 'POST',
      path: '/apis/apps/v1/namespaces/default/daemonsets',
      body: { apiVersion: 'apps/v1', kind: 'DaemonSet', metadata: { name: 'agent', namespace: 'default' }, spec: { selector: { matchLabels: { app: 'agent' } }, template: { metadata: template.metadata, spec: template.spec } } },
    });
    const nodes = await c.until('an agent pod running on each node', async () => {
      const list = await c.rest.json<{ items: V1Pod[] }>({ method: 'GET', path: '/api/v1/namespaces/default/pods?labelSelector=app%3Dagent' });
      const running = list.items.filter((p) => p.status?.phase === 'Running').map((p) => p.spec?.nodeName).sort();
      return running.length === 2 ? running : undefined;
    }, 30_000);
    assert.deepEqual(nodes, ['w1', 'w2']);
    const ds = await c.until('the DaemonSet status', async () => {
      const d = await c.rest.json<{ status?: { desiredNumberScheduled?: number; numberReady?: number } }>({ method: 'GET', path: '/apis/apps/v1/namespaces/default/daemonsets/agent' });
      return d.status?.numberReady === 2 ? d : undefined;
    });
    assert.equal(ds.status?.desiredNumberScheduled, 2);
  });

  await t.test('kubectl drain deletes what cannot move (its owner starts it elsewhere) and completes', async () => {
    const template = counterPod('fixed', 18104, { labels: { app: 'fixed' }, annotations: { 'kube32.io/migration': 'Never' } });
    await c.rest.json({
      method: 'POST',
      path: '/apis/apps/v1/namespaces/default/replicasets',
      body: { apiVersion: 'apps/v1', kind: 'ReplicaSet', metadata: { name: 'fixed', namespace: 'default' }, spec: { replicas: 1, selector: { matchLabels: { app: 'fixed' } }, template: { metadata: template.metadata, spec: template.spec } } },
    });
    const first = await c.until('the ReplicaSet pod to run', async () => {
      const list = await c.rest.json<{ items: V1Pod[] }>({ method: 'GET', path: '/api/v1/namespaces/default/pods?labelSelector=app%3Dfixed' });
      return list.items.find((p) => p.status?.phase === 'Running');
    }, 30_000);
    const node = first.spec!.nodeName!;
    // The open-file pod on this node too, if it is there: its eviction's move fails at the node, so it is deleted.
    const drain = await c.api.kubectl(['drain', node, '--ignore-daemonsets', '--force', '--timeout=90s'], { timeoutMs: 120_000 });
    assert.equal(drain.code, 0, drain.stderr);
    const second = await c.until('a new pod of the ReplicaSet elsewhere', async () => {
      const list = await c.rest.json<{ items: V1Pod[] }>({ method: 'GET', path: '/api/v1/namespaces/default/pods?labelSelector=app%3Dfixed' });
      return list.items.find((p) => p.status?.phase === 'Running' && p.spec?.nodeName !== node);
    }, 30_000);
    assert.notEqual(second.metadata?.name, first.metadata?.name, 'a new pod, not a move');
    assert.match(drain.stderr + drain.stdout, /ignoring DaemonSet-managed Pods: default\/agent-/i);
    const left = await c.rest.json<{ items: V1Pod[] }>({ method: 'GET', path: `/api/v1/pods?fieldSelector=spec.nodeName%3D${node}` });
    const others = left.items.filter((p) => !p.metadata?.deletionTimestamp && p.metadata?.ownerReferences?.[0]?.kind !== 'DaemonSet');
    assert.deepEqual(others.map((p) => p.metadata?.name), []);
  });
});
