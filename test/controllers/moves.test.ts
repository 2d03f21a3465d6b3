/**
 * End to end: a real API server, the controllers, and real kube32-sim workers. A Deployment's counter pod
 * is scheduled, moved by a Checkpoint and by `kubectl drain`, and keeps its count and its pod clock; the
 * Deployment counts one pod throughout.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { type Count, counterPod, startControllersCluster } from './cluster.ts';

const PORT = 18080;

test('a Deployment pod is scheduled, moves with its count and clock, and kubectl drain and a stopped worker move it again', { timeout: 180_000 }, async (t) => {
  const c = await startControllersCluster(t);
  await c.startWorker('w1');
  await c.startWorker('w2');
  await c.startWorker('w3');

  const template = counterPod('counter', PORT, { labels: { app: 'counter' } });
  const deploy = {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'counter', namespace: 'default' },
    spec: { replicas: 1, selector: { matchLabels: { app: 'counter' } }, template: { metadata: template.metadata, spec: template.spec } },
  };
  await c.rest.json({ method: 'POST', path: '/apis/apps/v1/namespaces/default/deployments', body: deploy });

  // Count the Deployment's pods on every event: never more than one.
  let most = 0;
  const seen = new Set<string>();
  const watchPods = async () => {
    const list = await c.rest.json<{ items: V1Pod[] }>({ method: 'GET', path: '/api/v1/namespaces/default/pods?labelSelector=app%3Dcounter' });
    const live = list.items.filter((p) => !p.metadata?.deletionTimestamp);
    most = Math.max(most, live.length);
    for (const p of live) seen.add(p.metadata?.uid ?? '');
    return live;
  };

  const running = await c.until('the counter pod to run', async () => {
    const pods = await watchPods();
    return pods.length === 1 && pods[0]!.status?.phase === 'Running' ? pods[0] : undefined;
  }, 60_000);
  const name = running.metadata!.name!;
  const source = running.spec!.nodeName!;
  let last: Count | undefined;
  for (let i = 0; i < 3; i++) {
    const r = await c.until('the counter to answer', async () => {
      const res = await c.podGet(running, PORT, '/count');
      return res.status === 200 ? (JSON.parse(res.body) as Count) : undefined;
    });
    last = r;
  }
  assert.equal(last!.count, 3);

  // Move it with a Checkpoint; the scheduler picks the target.
  await c.createCheckpoint({ metadata: { name: 'move-1', namespace: 'default' }, spec: { podName: name, action: 'Move' } });
  const done = await c.until('the move to complete', async () => {
    await watchPods();
    const ck = await c.getCheckpoint('move-1');
    if (ck?.status?.phase === 'Failed') throw new Error(`move failed: ${ck.status.message}`);
    return ck?.status?.phase === 'Completed' ? ck : undefined;
  }, 60_000);
  assert.equal(done.status?.nodeName, source);
  assert.notEqual(done.status?.targetNode, source);
  assert.ok((done.status?.sizeBytes ?? 0) > 0, 'the snapshot facts are in the status');
  const moved = (await c.getPod(name))!;
  seen.add(moved.metadata?.uid ?? '');
  assert.equal(moved.spec?.nodeName, done.status?.targetNode);
  assert.notEqual(moved.metadata?.uid, running.metadata?.uid, 'a new uid');
  assert.equal(moved.metadata?.annotations?.['kube32.io/restore-from'], undefined, 'the annotation is removed once it runs');
  const after = await c.until('the moved counter to answer', async () => {
    const res = await c.podGet(moved, PORT, '/count');
    return res.status === 200 ? (JSON.parse(res.body) as Count) : undefined;
  });
  assert.equal(after.count, 4, 'the count carried over');
  assert.ok(after.podTimeMs >= last!.podTimeMs, 'the pod clock never goes backward');
  const events = await c.until('the Moving and Moved events', async () => {
    const evs = await c.events();
    const reasons = evs.filter((e) => e.involvedObject?.name === name).map((e) => e.reason);
    return reasons.includes('Moving') && reasons.includes('Moved') ? evs : undefined;
  });
  assert.match(events.find((e) => e.reason === 'Moved')!.message ?? '', /ms from the freeze/);

  // kubectl drain moves it through an eviction.
  const target = moved.spec!.nodeName!;
  const drain = await c.api.kubectl(['drain', target, '--ignore-daemonsets', '--timeout=60s'], { timeoutMs: 90_000 });
  assert.equal(drain.code, 0, drain.stderr);
  const drained = await c.until('the pod to run elsewhere after the drain', async () => {
    await watchPods();
    const p = await c.getPod(name);
    return p && p.spec?.nodeName !== target && p.status?.phase === 'Running' && !p.metadata?.annotations?.['kube32.io/restore-from'] ? p : undefined;
  }, 60_000);
  seen.add(drained.metadata?.uid ?? ''); // a list may have missed it: it can come and run between a list and the get
  const afterDrain = await c.until('the drained counter to answer', async () => {
    const res = await c.podGet(drained, PORT, '/count');
    return res.status === 200 ? (JSON.parse(res.body) as Count) : undefined;
  });
  assert.equal(afterDrain.count, 5, 'the count carried over the drain');
  assert.ok(afterDrain.podTimeMs >= after.podTimeMs, 'the pod clock carried over the drain');
  assert.equal(drained.metadata?.name, name, 'same name');

  // A worker stopped with SIGTERM drains itself: the pod moves again, to the one node left uncordoned.
  const w = c.workers.get(drained.spec!.nodeName!)!;
  w.proc.kill('SIGTERM');
  assert.equal(await w.exited, 0, w.logs().slice(-2000));
  const final = await c.until('the pod to run after the self-drain', async () => {
    await watchPods();
    const p = await c.getPod(name);
    return p && p.spec?.nodeName !== w.name && p.status?.phase === 'Running' && !p.metadata?.annotations?.['kube32.io/restore-from'] ? p : undefined;
  }, 60_000);
  seen.add(final.metadata?.uid ?? '');
  const afterStop = await c.until('the counter to answer after the self-drain', async () => {
    const res = await c.podGet(final, PORT, '/count');
    return res.status === 200 ? (JSON.parse(res.body) as Count) : undefined;
  });
  assert.equal(afterStop.count, 6, 'the count carried over the self-drain');
  assert.ok(afterStop.podTimeMs >= afterDrain.podTimeMs);
  assert.equal(most, 1, 'the Deployment counted one pod at every step');
  assert.equal(seen.size, 4, 'four incarnations: the first, the moved, the drained, the self-drained');
});
