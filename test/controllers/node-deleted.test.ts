/**
 * Pods bound to a node that has no Node object (Kubernetes' PodGC of orphaned pods): found by a trial
 * user who SIGKILLed a worker and ran `kubectl delete node` on it. Its pods stayed Running on the deleted
 * node forever: their Deployment counted them available, their Service routed to a dead address, and a
 * pod bound to a node that never existed stayed `Terminating` once deleted. Now, the grace period after
 * the node is gone, a pod with a Saved periodic checkpoint restores elsewhere with its state, and the
 * others are deleted (their owners make new ones).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import type { Checkpoint } from '../../src/api/index.ts';
import { count, counterPod, runPod, startControllersCluster } from './cluster.ts';

const PORT = 18580;

test('the pods of a deleted node go once the grace period is over: a checkpointed one restores elsewhere, the others are deleted', { timeout: 240_000 }, async (t) => {
  const c = await startControllersCluster(t, { nodeMonitorGracePeriodMs: 15_000, podEvictionTimeoutMs: 600_000 });
  const w1 = await c.startWorker('w1');
  await c.startWorker('w2');
  const plain = await runPod(c, counterPod('plain', PORT, { nodeName: 'w1' }));
  const keeper = await runPod(c, counterPod('keeper', PORT + 1, { nodeName: 'w1', annotations: { 'kube32.io/checkpoint-interval': '10s' } }));
  await count(c, keeper, PORT + 1);
  const before = await count(c, keeper, PORT + 1);
  await c.until('a Saved periodic checkpoint of keeper', async () => {
    const list = await c.rest.json<{ items: Checkpoint[] }>({ method: 'GET', path: '/apis/kube32.io/v1/namespaces/default/checkpoints?labelSelector=kube32.io%2Ftrigger%3Dperiodic' });
    return list.items.some((ck) => ck.spec?.podName === 'keeper' && ck.status?.phase === 'Saved' && (ck.status.podTimeMs ?? 0) >= before.podTimeMs);
  }, 30_000);
  // A pod bound to a node that never registered (POST .../binding takes any name, as in Kubernetes).
  await c.rest.json({ method: 'POST', path: '/api/v1/namespaces/default/pods', body: counterPod('ghost', PORT + 2, { nodeName: 'nowhere' }) });

  w1.proc.kill('SIGKILL');
  await w1.exited;
  await c.rest.json({ method: 'DELETE', path: '/api/v1/nodes/w1' });
  const deletedAt = Date.now();

  await c.until('plain, bound to the deleted w1, to be deleted', async () => (await c.getPod('plain')) === undefined, 60_000);
  assert.ok(Date.now() - deletedAt >= 10_000, 'not before the grace period (15 s from when the controller saw w1 gone)');
  await c.until('ghost, bound to a node that never existed, to be deleted', async () => (await c.getPod('ghost')) === undefined, 30_000);
  const moved = await c.until('keeper to run on w2 from its checkpoint', async () => {
    const p = await c.getPod('keeper');
    return p?.spec?.nodeName === 'w2' && p.status?.phase === 'Running' && p.metadata?.uid !== keeper.metadata?.uid ? p : undefined;
  }, 60_000);
  const after = await count(c, moved as V1Pod, PORT + 1);
  assert.ok(after.restored >= 1, `keeper restored from its checkpoint: ${JSON.stringify(after)}`);
  assert.ok(after.count > 1 && after.podTimeMs >= before.podTimeMs, `keeper went on from its checkpoint (before ${JSON.stringify(before)}, after ${JSON.stringify(after)})`);
  assert.notEqual(plain.metadata?.uid, undefined);
});
