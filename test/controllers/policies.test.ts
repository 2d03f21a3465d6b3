/**
 * End to end: the Auto policy (seed "Policies"): a faster node joining draws a `placement: fastest` pod to
 * it, and memory pressure on a node moves its Auto pod that requests the most memory. Real API server,
 * controllers and kube32-sim workers (speeds fixed with --interp-mops, a small heap with --heap).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Checkpoint } from '../../src/api/index.ts';
import { type Count, type ControllersCluster, count, counterPod, runPod, startControllersCluster } from './cluster.ts';

async function checkpointsOf(c: ControllersCluster, pod: string): Promise<Checkpoint[]> {
  const list = await c.rest.json<{ items: Checkpoint[] }>({ method: 'GET', path: '/apis/kube32.io/v1/namespaces/default/checkpoints' });
  return list.items.filter((x) => x.spec.podName === pod);
}

test('Auto pods move on their own: to a faster node, and off a node under memory pressure', { timeout: 240_000 }, async (t) => {
  const c = await startControllersCluster(t);
  await c.startWorker('slow', ['--interp-mops', '10']);

  await t.test('a node at least twice as fast joins: the fastest pod moves there with its state', async () => {
    const pod = await runPod(c, counterPod('speedy', 18301, { annotations: { 'kube32.io/migration': 'Auto', 'kube32.io/placement': 'fastest' } }));
    assert.equal(pod.spec?.nodeName, 'slow');
    assert.equal((await count(c, pod, 18301)).count, 1);
    await c.startWorker('fast', ['--interp-mops', '100']);
    const moved = await c.until('speedy to run on the fast node', async () => {
      const p = await c.getPod('speedy');
      return p?.spec?.nodeName === 'fast' && p.status?.phase === 'Running' && !p.metadata?.annotations?.['kube32.io/restore-from'] ? p : undefined;
    }, 40_000);
    assert.equal((await count(c, moved, 18301)).count, 2);
    // Completed is written after the pod's restore-from annotation is removed: wait for it.
    const cks = await c.until('the placement Checkpoint to be Completed', async () => {
      const list = await checkpointsOf(c, 'speedy');
      return list.length > 0 && list.every((x) => x.status?.phase === 'Completed' || x.status?.phase === 'Failed') ? list : undefined;
    });
    assert.deepEqual(cks.map((x) => [x.metadata?.labels?.['kube32.io/trigger'], x.spec.target?.nodeName, x.status?.phase]), [['placement', 'fast', 'Completed']]);
  });

  await t.test('memory pressure: the Auto pod that requests the most memory moves, the other stays', async () => {
    await c.startWorker('tight', ['--heap', '150Ki', '--interp-mops', '10']);
    const stay = await runPod(c, counterPod('stay', 18302, { nodeName: 'tight' }));
    const big = counterPod('big', 18303, { nodeName: 'tight', annotations: { 'kube32.io/migration': 'Auto' } });
    const running = await runPod(c, big);
    const before = await c.podGet(running, 18303, '/count').catch(() => undefined);
    const moved = await c.until('big to move off the tight node', async () => {
      const p = await c.getPod('big');
      return p && p.spec?.nodeName !== 'tight' && p.status?.phase === 'Running' ? p : undefined;
    }, 40_000);
    assert.ok(['slow', 'fast'].includes(moved.spec!.nodeName!));
    if (before?.status === 200) {
      // The request may have reached it before the freeze: then the count carried over.
      assert.equal((await count(c, moved, 18303)).count, (JSON.parse(before.body) as Count).count + 1);
    }
    const cks = await checkpointsOf(c, 'big');
    assert.equal(cks[0]?.metadata?.labels?.['kube32.io/trigger'], 'memory-pressure');
    const after = (await c.getPod('stay'))!;
    assert.equal(after.metadata?.uid, stay.metadata?.uid, 'the OnDrain pod stays');
  });
});
