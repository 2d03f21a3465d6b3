/**
 * The self-drain with the whole control plane: a kube32-sim worker stopped with SIGTERM cordons
 * itself, marks itself left, and its pod moves to the other worker with its state (seed "Drain
 * and evictions"); the worker exits 0.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { fetch } from 'undici';
import { startCluster, fixturePod, freePort } from './cluster.ts';

interface Count { count: number; restored: number }

async function count(address: string, port: number, path = '/count'): Promise<Count> {
  const res = await fetch(`http://${address}:${port}${path}`, { signal: AbortSignal.timeout(10_000) });
  assert.equal(res.status, 200);
  return (await res.json()) as Count;
}

test('a worker stopped with SIGTERM drains itself: its pod moves with its state, the worker exits 0', { timeout: 120_000 }, async (t) => {
  const c = await startCluster(t, { controllers: true });
  const w1 = await c.startWorker('d1', '127.0.0.4', ['--interp-mops', '1000']);
  await c.startWorker('d2', '127.0.0.5', ['--interp-mops', '1000']);
  // The same containerPort is free on both addresses: the pod keeps its port across the move.
  const port = await freePort(['127.0.0.4', '127.0.0.5']);
  await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('mover', 'd1', port) });
  const first = await c.until('mover Running on d1', async () => {
    const p = await c.getPod('mover');
    return p?.status?.phase === 'Running' && p.status.podIP === '127.0.0.4' ? p : undefined;
  }, 30_000);
  assert.equal((await count('127.0.0.4', port)).count, 1);
  assert.equal((await count('127.0.0.4', port)).count, 2);

  w1.proc.kill('SIGTERM');
  const moved = await c.until('mover Running on d2 with a new uid', async () => {
    const p = await c.getPod('mover');
    return p?.metadata?.uid !== first.metadata?.uid && p?.spec?.nodeName === 'd2' && p.status?.phase === 'Running' ? p : undefined;
  }, 30_000);
  assert.equal(moved.status?.podIP, '127.0.0.5');
  const after = await count('127.0.0.5', port);
  assert.equal(after.count, 3, 'the count goes on after the move');
  assert.equal(after.restored, 1);
  assert.equal(await w1.exited, 0, w1.stderr().slice(-2000));
  assert.match(w1.stdout(), /drained: 1 evicted, 0 left behind/);
  const n = await c.admin.json<V1Node>('GET', '/api/v1/nodes/d1');
  assert.equal(n.spec?.unschedulable, true);
  assert.equal(n.metadata?.annotations?.['kube32.io/left'], 'true');
  assert.equal(n.status?.conditions?.find((x) => x.type === 'Ready')?.status, 'False');
  const pods = await c.admin.json<{ items: V1Pod[] }>('GET', '/api/v1/namespaces/default/pods');
  assert.deepEqual(pods.items.map((p) => p.metadata?.name), ['mover']);

  // The worker comes back on the same data dir: the Node is uncordoned and no longer marked left.
  await c.startWorker('d1', '127.0.0.4', ['--interp-mops', '1000']);
  const back = await c.until('d1 Ready again', async () => {
    const node = await c.admin.json<V1Node>('GET', '/api/v1/nodes/d1');
    return node.status?.conditions?.find((x) => x.type === 'Ready')?.status === 'True' ? node : undefined;
  });
  assert.notEqual(back.spec?.unschedulable, true);
  assert.equal(back.metadata?.annotations?.['kube32.io/left'], undefined);
});
