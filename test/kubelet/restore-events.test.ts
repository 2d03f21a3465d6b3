/**
 * The events of a restored container, as `kubectl describe pod` shows them: a pod restored from a
 * Checkpoint on another node (a move by hand, as the checkpoint controller makes one) has the kubelet's
 * `Pulled` and then `Restored`, naming the Checkpoint and the node it was taken on, and no `Created` or
 * `Started` as if it were a new container. Events are matched on their source component (`kubelet`).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { CoreV1Event } from '@kubernetes/client-node';
import { readBytes } from '../../src/api/index.ts';
import { type Cluster, fixturePod, freePort, startCluster } from './cluster.ts';

/** The reasons and messages of the kubelet's events about the pod of `uid`, in name (time) order. */
async function kubeletEvents(c: Cluster, uid: string): Promise<Array<{ reason: string; message: string }>> {
  const list = await c.admin.json<{ items: CoreV1Event[] }>('GET', '/api/v1/namespaces/default/events');
  return list.items
    .filter((e) => e.involvedObject?.uid === uid && e.source?.component === 'kubelet')
    .map((e) => ({ reason: e.reason ?? '', message: e.message ?? '' }));
}

test('a container restored on another node: Pulled then Restored (the Checkpoint, the node), no Created or Started', { timeout: 120_000 }, async (t) => {
  const c = await startCluster(t);
  await c.startWorker('w1', '127.0.0.2');
  await c.startWorker('w2', '127.0.0.3');
  const p1 = await freePort('127.0.0.2');
  await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('mover', 'w1', p1) });
  const first = await c.until('mover Running', async () => {
    const p = await c.getPod('mover');
    return p?.status?.phase === 'Running' ? p : undefined;
  }, 30_000);
  const started = await c.until('the first pod\'s Started', async () => {
    const evs = await kubeletEvents(c, first.metadata!.uid!);
    return evs.some((e) => e.reason === 'Started') ? evs : undefined;
  });
  assert.deepEqual(started.map((e) => e.reason).filter((r) => r === 'Created' || r === 'Started'), ['Created', 'Started'], 'a new container is Created and Started');

  await c.admin.json('POST', '/apis/kube32.io/v1/namespaces/default/checkpoints', {
    body: { apiVersion: 'kube32.io/v1', kind: 'Checkpoint', metadata: { name: 'mover-move' }, spec: { podName: 'mover', action: 'Move' } },
  });
  const taken = await c.admin.request('POST', '/apis/kube32.io/v1/namespaces/default/checkpoints/mover-move/data?node=w1&container=c&leave=frozen&target=w2');
  assert.equal(taken.status, 200, (await readBytes(taken.body)).toString());
  await c.admin.json('DELETE', '/api/v1/namespaces/default/pods/mover?gracePeriodSeconds=0');
  await c.until('the old pod gone', async () => (await c.getPod('mover')) === undefined);
  const p2 = await freePort('127.0.0.3');
  const again = await c.admin.json<{ metadata: { uid: string } }>('POST', '/api/v1/namespaces/default/pods', {
    body: fixturePod('mover', 'w2', p2, { annotations: { 'kube32.io/restore-from': 'mover-move' } }),
  });
  const evs = await c.until('the restored pod\'s Restored', async () => {
    const list = await kubeletEvents(c, again.metadata.uid);
    return list.some((e) => e.reason === 'Restored') ? list : undefined;
  }, 30_000);
  const reasons = evs.map((e) => e.reason);
  assert.ok(!reasons.includes('Created') && !reasons.includes('Started'), `no Created or Started for a restored container: ${reasons.join(', ')}`);
  const pulled = reasons.indexOf('Pulled');
  assert.ok(pulled >= 0 && pulled < reasons.indexOf('Restored'), `Pulled, then Restored: ${reasons.join(', ')}`);
  assert.equal(evs.find((e) => e.reason === 'Restored')!.message, 'Restored container c from Checkpoint mover-move, taken on node w1');
  const d = await c.kubectl(['describe', 'pod', 'mover']);
  assert.equal(d.code, 0, d.stderr);
  assert.match(d.stdout, /Normal\s+Restored\s+.*kubelet\s+Restored container c from Checkpoint mover-move, taken on node w1/);
});
