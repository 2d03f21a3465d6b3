/**
 * End to end: a move that rolls back, and a node lost with SIGKILL whose pod comes back from its periodic
 * checkpoint (seed "Moves" rollback paragraph, "Periodic checkpoints and node loss", "Retention"). A real
 * API server, the controllers with short timings (move timeout 3 s; a node is Unknown after 15 s without a
 * Lease renewal, which kube32-sim makes every 10 s; evictions 1 s later), and three kube32-sim workers.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Node } from '@kubernetes/client-node';
import type { Checkpoint } from '../../src/api/index.ts';
import { count, counterPod, runPod, startControllersCluster } from './cluster.ts';
import { stopProcess } from '../helpers/process-stop.ts';

test('a move that does not run in time rolls back; a lost node restores from the periodic checkpoint', { timeout: 240_000 }, async (t) => {
  const c = await startControllersCluster(t, {
    moveTimeoutMs: 3000,
    nodeMonitorGracePeriodMs: 15_000,
    podEvictionTimeoutMs: 1000,
    minCheckpointIntervalMs: 1000,
  });
  const w1 = await c.startWorker('w1');
  const w2 = await c.startWorker('w2');
  await c.startWorker('w3');

  await t.test('the replacement does not run within the move timeout: the pod restores on its source', async () => {
    const pod = await runPod(c, counterPod('roller', 18201, { nodeName: 'w1' }));
    await count(c, pod, 18201);
    const second = await count(c, pod, 18201);
    assert.equal(second.count, 2);
    await stopProcess(w2.proc.pid!); // the target takes nothing in
    try {
      await c.createCheckpoint({ metadata: { name: 'roller-move', namespace: 'default' }, spec: { podName: 'roller', action: 'Move', target: { nodeName: 'w2' } } });
      const ck = await c.until('the move to roll back', async () => {
        const x = await c.getCheckpoint('roller-move');
        return x?.status?.phase === 'Failed' || x?.status?.phase === 'Completed' ? x : undefined;
      }, 30_000);
      assert.equal(ck.status?.phase, 'Failed');
      assert.match(ck.status?.message ?? '', /did not run on w2 within 3 s; rolled back to w1/, JSON.stringify(ck.status));
      const back = await c.until('the pod to run on w1 again', async () => {
        const p = await c.getPod('roller');
        return p?.spec?.nodeName === 'w1' && p.status?.phase === 'Running' && !p.metadata?.annotations?.['kube32.io/restore-from'] ? p : undefined;
      }, 30_000);
      assert.notEqual(back.metadata?.uid, pod.metadata?.uid);
      const third = await count(c, back, 18201);
      assert.equal(third.count, 3, 'restored from the same checkpoint');
      assert.ok(third.podTimeMs >= second.podTimeMs, 'the pod clock never goes backward');
      // Each event follows the write that decided it: wait for both.
      await c.until('MoveFailed and Restored on the pod', async () => {
        const reasons = (await c.events()).filter((e) => e.involvedObject?.name === 'roller' && e.source?.component === 'kube32-controller-manager').map((e) => e.reason);
        return reasons.includes('MoveFailed') && reasons.includes('Restored');
      });
    } finally {
      w2.proc.kill('SIGCONT');
    }
  });

  await t.test('a node killed with SIGKILL: its pod comes back elsewhere from the latest periodic checkpoint', async () => {
    const pod = await runPod(c, counterPod('keeper', 18202, { nodeName: 'w1', annotations: { 'kube32.io/checkpoint-interval': '1s' } }));
    for (let i = 0; i < 3; i++) await count(c, pod, 18202);
    // The pod is checkpointed every second, and frozen meanwhile (503): ask until it answers.
    const shown = await count(c, pod, 18202, '/show');
    const countedAt = Date.now();
    const saved = await c.until('a periodic checkpoint after the third request', async () => {
      const list = await c.rest.json<{ items: Checkpoint[] }>({ method: 'GET', path: '/apis/kube32.io/v1/namespaces/default/checkpoints?labelSelector=kube32.io%2Ftrigger%3Dperiodic' });
      return list.items.find((x) => x.spec.podName === 'keeper' && x.status?.phase === 'Saved' && Date.parse(x.status.takenAt ?? '') > countedAt + 200);
    }, 30_000);
    assert.equal(saved.metadata?.labels?.['kube32.io/trigger'], 'periodic');
    // Retention: once a newer periodic checkpoint is Saved, the older Saved ones go at once.
    await c.until('only the latest Saved periodic checkpoint to stay', async () => {
      const list = await c.rest.json<{ items: Checkpoint[] }>({ method: 'GET', path: '/apis/kube32.io/v1/namespaces/default/checkpoints?labelSelector=kube32.io%2Ftrigger%3Dperiodic' });
      const saved = list.items.filter((x) => x.spec.podName === 'keeper' && x.status?.phase === 'Saved');
      return saved.length === 1 ? saved : undefined;
    }, 20_000); // a bound on a hang, not a measure: a loaded machine slows each Save and each delete

    w1.proc.kill('SIGKILL');
    await w1.exited;
    const node = await c.until('w1 to turn Unknown and tainted', async () => {
      const n = await c.rest.json<V1Node>({ method: 'GET', path: '/api/v1/nodes/w1' });
      const ready = n.status?.conditions?.find((x) => x.type === 'Ready');
      return ready?.status === 'Unknown' && n.spec?.taints?.some((x) => x.key === 'node.kubernetes.io/unreachable') ? n : undefined;
    }, 40_000);
    assert.equal(node.status?.conditions?.find((x) => x.type === 'Ready')?.reason, 'NodeStatusUnknown');
    const back = await c.until('keeper to run on another node', async () => {
      const p = await c.getPod('keeper');
      return p && p.spec?.nodeName !== 'w1' && p.status?.phase === 'Running' && !p.metadata?.annotations?.['kube32.io/restore-from'] ? p : undefined;
    }, 40_000);
    assert.notEqual(back.metadata?.uid, pod.metadata?.uid);
    const fourth = await count(c, back, 18202);
    if (fourth.count !== 4) {
      // Say why: the pod's events and the Checkpoints as they are now.
      const why = (await c.events()).filter((e) => e.involvedObject?.name === 'keeper').map((e) => `${e.reason}: ${e.message}`);
      const cks = await c.rest.json<{ items: Checkpoint[] }>({ method: 'GET', path: '/apis/kube32.io/v1/namespaces/default/checkpoints' });
      assert.fail(`restored with count ${fourth.count}, not 4 (the state of ${saved.metadata?.name}); events: ${JSON.stringify(why)}; checkpoints: ${JSON.stringify(cks.items.map((x) => [x.metadata?.name, x.status?.phase, x.status?.takenAt, x.status?.message]))}`);
    }
    assert.ok(fourth.podTimeMs >= shown.podTimeMs, 'the pod clock continues from the checkpoint, after the third request');
    // Two Restored events: the controller's (the checkpoint's age) and the kubelet's (the checkpoint and its node).
    const restored = await c.until('the Restored event', async () =>
      (await c.events()).find((e) => e.reason === 'Restored' && e.involvedObject?.uid === back.metadata?.uid && e.source?.component === 'kube32-controller-manager'));
    assert.match(restored.message ?? '', /restored from checkpoint keeper-periodic-\w+, taken \d+s ago/);
    const byKubelet = await c.until('the kubelet\'s Restored event', async () => {
      const mine = (await c.events()).filter((e) => e.involvedObject?.uid === back.metadata?.uid && e.source?.component === 'kubelet').map((e) => `${e.reason}: ${e.message}`);
      return mine.some((e) => e.startsWith('Restored:')) ? mine : undefined;
    });
    assert.ok(byKubelet.some((e) => /^Restored: Restored container \S+ from Checkpoint keeper-periodic-\w+, taken on node w1$/.test(e)), byKubelet.join('\n'));
    assert.ok(!byKubelet.some((e) => /^(Created|Started):/.test(e)), `no Created or Started for the restored container: ${byKubelet.join('; ')}`);
    // The pod without a checkpoint on the lost node is deleted for rescheduling (it has no owner).
    await c.until('roller to be deleted', async () => (await c.getPod('roller')) === undefined, 20_000);
  });
});

test('a replacement that cannot restore (its data dropped) rolls back; the source cannot either: the pod starts afresh', { timeout: 180_000 }, async (t) => {
  // 100 KiB of checkpoint data: storing a second counter snapshot (about 64 KiB) drops the first.
  const c = await startControllersCluster(t, {}, { apiServerArgs: ['--checkpoint-data-bytes', '100Ki'] });
  await c.startWorker('w1');
  const w2 = await c.startWorker('w2');
  const pod = await runPod(c, counterPod('fragile', 18211, { nodeName: 'w1' }));
  assert.equal((await count(c, pod, 18211)).count, 1);
  await runPod(c, counterPod('other', 18212, { nodeName: 'w1' }));
  await stopProcess(w2.proc.pid!); // the target takes the replacement in only once the data is gone
  try {
    await c.createCheckpoint({ metadata: { name: 'fragile-move', namespace: 'default' }, spec: { podName: 'fragile', action: 'Move', target: { nodeName: 'w2' } } });
    await c.until('the replacement bound to w2', async () => (await c.getCheckpoint('fragile-move'))?.status?.phase === 'Moving', 30_000);
    await c.createCheckpoint({ metadata: { name: 'other-save', namespace: 'default' }, spec: { podName: 'other' } });
    const saved = await c.until('the other snapshot stored', async () => {
      const x = await c.getCheckpoint('other-save');
      return x?.status?.phase === 'Saved' || x?.status?.phase === 'Failed' ? x : undefined;
    }, 30_000);
    assert.equal(saved.status?.phase, 'Saved', String(saved.status?.message));
  } finally {
    w2.proc.kill('SIGCONT');
  }
  const ck = await c.until('the move to roll back', async () => {
    const x = await c.getCheckpoint('fragile-move');
    return x?.status?.phase === 'Failed' || x?.status?.phase === 'Completed' ? x : undefined;
  }, 60_000);
  assert.equal(ck.status?.phase, 'Failed');
  assert.match(ck.status?.message ?? '', /the replacement on w2 failed: RestoreError.*; rolled back to w1/, JSON.stringify(ck.status));
  // The source cannot restore from the same (dataless) Checkpoint either: the pod is replaced afresh.
  const fresh = await c.until('the pod to run afresh', async () => {
    const p = await c.getPod('fragile');
    return p?.status?.phase === 'Running' && !p.metadata?.annotations?.['kube32.io/restore-from'] ? p : undefined;
  }, 60_000);
  assert.equal((await count(c, fresh, 18211)).count, 1, 'a fresh start');
  // The rollback's MoveFailed and the failed restore's, each after the write that decided it.
  await c.until('two MoveFailed events on the pod', async () => {
    const reasons = (await c.events()).filter((e) => e.involvedObject?.name === 'fragile').map((e) => e.reason);
    return reasons.filter((r) => r === 'MoveFailed').length >= 2;
  });
});
