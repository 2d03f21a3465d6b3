import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Lease, V1Pod } from '@kubernetes/client-node';
import type { Checkpoint } from '../../api/index.ts';
import { fakeContext, node, pod } from '../testing/fakes.ts';
import { reconcileNode } from './reconcile.ts';

function lease(name: string, renew: string, rv: string): V1Lease {
  return { metadata: { name, namespace: 'kube-node-lease', resourceVersion: rv }, spec: { holderIdentity: name, renewTime: renew as unknown as Date } };
}

function setup() {
  const t = fakeContext({ nodeMonitorGracePeriodMs: 40_000, podEvictionTimeoutMs: 300_000 });
  for (const n of ['a', 'b', 'c']) {
    t.cache.nodes.set(node(n));
    t.cache.leases.set(lease(n, '2026-01-01T00:00:00.000000Z', '1'));
  }
  return t;
}

test('a node renewing its Lease is left alone, and looked at again when the grace would run out', { timeout: 5000 }, async () => {
  const { ctx, fake, clock, cache } = setup();
  assert.deepEqual(await reconcileNode('a', ctx), { requeueAfterMs: 40_000 });
  clock.advance(30_000);
  cache.leases.set(lease('a', '2026-01-01T00:00:30.000000Z', '2'));
  assert.deepEqual(await reconcileNode('a', ctx), { requeueAfterMs: 40_000 });
  assert.deepEqual(fake.calls, []);
});

test('a node silent for the grace period, by the controller clock, turns Unknown and gets the unreachable taints', { timeout: 5000 }, async () => {
  const { ctx, fake, clock } = setup();
  await reconcileNode('a', ctx);
  clock.advance(40_000);
  const res = await reconcileNode('a', ctx);
  assert.deepEqual(fake.calls.map((c) => c.op), ['patchNodeStatus', 'patchNode']);
  const cond = (fake.calls[0]!.args[1] as { status: { conditions: Array<{ type: string; status: string; reason: string }> } }).status.conditions[0]!;
  assert.deepEqual([cond.type, cond.status, cond.reason], ['Ready', 'Unknown', 'NodeStatusUnknown']);
  const taints = (fake.calls[1]!.args[1] as { spec: { taints: Array<{ key: string; effect: string }> } }).spec.taints;
  assert.deepEqual(taints.map((x) => `${x.key}:${x.effect}`), ['node.kubernetes.io/unreachable:NoSchedule', 'node.kubernetes.io/unreachable:NoExecute']);
  assert.deepEqual(res, { requeueAfterMs: 5_000 }, 'restores from checkpoints wait for the node loss restore delay');
});

test('5 s after Unknown a pod with a Saved periodic checkpoint is replaced unbound with restore-from; after the eviction timeout the others are deleted', { timeout: 5000 }, async () => {
  const { ctx, fake, clock, cache } = setup();
  cache.pods.set(pod('keeper', { nodeName: 'a', running: true, uid: 'k1' }));
  cache.pods.set(pod('plain', { nodeName: 'a', running: true, uid: 'p1', owner: { kind: 'ReplicaSet', name: 'rs', uid: 'rs1' } }));
  cache.pods.set(pod('ds', { nodeName: 'a', running: true, owner: { kind: 'DaemonSet', name: 'd', uid: 'd1' } }));
  const saved = (name: string, takenAt: string): Checkpoint => ({
    metadata: { name, namespace: 'default', labels: { 'kube32.io/trigger': 'periodic' } },
    spec: { podName: 'keeper' },
    status: { phase: 'Saved', takenAt },
  });
  cache.checkpoints.set(saved('keeper-periodic-1', '2026-01-01T00:00:01.000Z'));
  cache.checkpoints.set(saved('keeper-periodic-2', '2026-01-01T00:00:02.000Z'));
  await reconcileNode('a', ctx);
  clock.advance(40_000);
  await reconcileNode('a', ctx);
  const n = cache.nodes.get('a')!;
  n.status!.conditions = [{ type: 'Ready', status: 'Unknown', lastTransitionTime: new Date(clock.now()).toISOString() as unknown as Date }];
  n.spec!.taints = [{ key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule' }, { key: 'node.kubernetes.io/unreachable', effect: 'NoExecute' }];
  fake.calls.length = 0;
  // The fast path: 5 s after Unknown, the pod with a checkpoint restores elsewhere (its node fenced it).
  clock.advance(4_999);
  assert.deepEqual(await reconcileNode('a', ctx), { requeueAfterMs: 1 });
  clock.advance(1);
  assert.deepEqual(await reconcileNode('a', ctx), { requeueAfterMs: 295_000 });
  assert.deepEqual(fake.calls.map((c) => [c.op, c.args[1]]), [['replacePod', 'keeper']]);
  const replacement = fake.calls[0]!.args[2] as V1Pod;
  assert.equal(replacement.spec?.nodeName, undefined, 'the scheduler places it');
  assert.equal(replacement.metadata?.annotations?.['kube32.io/restore-from'], 'keeper-periodic-2', 'the latest one');
  // The others at the eviction timeout.
  fake.calls.length = 0;
  clock.advance(295_000);
  // b and c renewed meanwhile (else most nodes look unhealthy and nothing is evicted).
  for (const x of ['b', 'c']) cache.leases.set(lease(x, '2026-01-01T00:05:00.000000Z', '2'));
  await reconcileNode('a', ctx);
  assert.deepEqual(fake.calls.filter((c) => c.op === 'deletePod').map((c) => [c.op, c.args[1]]), [['deletePod', 'plain']]);
  assert.deepEqual(fake.calls.find((c) => c.op === 'deletePod')!.args[2], { uid: 'p1', gracePeriodSeconds: 0 });
});

test('no evictions while most nodes look unhealthy at once', { timeout: 5000 }, async () => {
  const { ctx, fake, clock, cache } = setup();
  cache.pods.set(pod('plain', { nodeName: 'a', running: true }));
  for (const n of ['a', 'b', 'c']) await reconcileNode(n, ctx);
  clock.advance(40_000);
  for (const n of ['a', 'b', 'c']) {
    const x = cache.nodes.get(n)!;
    x.status!.conditions = [{ type: 'Ready', status: 'Unknown', lastTransitionTime: new Date(clock.now()).toISOString() as unknown as Date }];
  }
  clock.advance(300_000);
  fake.calls.length = 0;
  await reconcileNode('a', ctx);
  assert.deepEqual(fake.calls.filter((c) => c.op === 'deletePod' || c.op === 'replacePod'), []);
});

test('a node that comes back posting Ready=True beside its old Lease is alive: the later of renewal and heartbeat counts', { timeout: 5000 }, async () => {
  const { ctx, fake, clock, cache } = setup();
  await reconcileNode('a', ctx);
  clock.advance(52_000);
  // The node was lost (its Lease last renewed 52 s ago) and its kubelet has just posted Ready=True.
  const n = cache.nodes.get('a')!;
  n.status!.conditions = [{ type: 'Ready', status: 'True', lastHeartbeatTime: new Date(clock.now()).toISOString() as unknown as Date }];
  assert.deepEqual(await reconcileNode('a', ctx), { requeueAfterMs: 40_000 });
  assert.equal(fake.calls.length, 0, 'no Ready=Unknown, no unreachable taints');
  clock.advance(40_000);
  await reconcileNode('a', ctx);
  assert.deepEqual(fake.calls.map((c) => c.op), ['patchNodeStatus', 'patchNode'], 'silent again for the grace period: Unknown');
});

test('a grace period at or below the 10 s Lease renew interval is warned about when the controller starts, a longer one is not', { timeout: 5000 }, async () => {
  const { newNodeLifecycleController } = await import('./controller.ts');
  const informers = { on: () => {} } as unknown as Parameters<typeof newNodeLifecycleController>[1];
  const warned = (graceMs: number): string[] => {
    const { ctx } = fakeContext({ nodeMonitorGracePeriodMs: graceMs });
    const lines: string[] = [];
    ctx.log = { ...ctx.log, warn: (_o: object, m?: string) => void lines.push(m ?? '') };
    newNodeLifecycleController(ctx, informers);
    return lines;
  };
  const at10 = warned(10_000);
  assert.equal(at10.length, 1);
  assert.match(at10[0]!, /--node-monitor-grace-period 10s is not longer than the kubelet's Lease renew interval \(10s\): healthy nodes will flap/);
  assert.deepEqual(warned(11_000), []);
  assert.deepEqual(warned(40_000), []);
});
