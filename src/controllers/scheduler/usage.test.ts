import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import fc from 'fast-check';
import { podHoldsNode, podMemoryRequest, NodeUsage, podPorts } from '../../api/index.ts';
import { fakeContext, node, pod } from '../testing/fakes.ts';
import { AssumedPods, reconcileSchedule } from './reconcile.ts';

/** The sums from scratch: informer state first, else the assumption. */
function bruteForce(informed: Map<string, V1Pod>, assumed: Map<string, { pod: V1Pod; node: string }>) {
  const out = new Map<string, { memory: number; pods: number; ports: string[] }>();
  const add = (p: V1Pod, n: string) => {
    const u = out.get(n) ?? { memory: 0, pods: 0, ports: [] };
    u.memory += podMemoryRequest(p);
    u.pods += 1;
    u.ports.push(...podPorts(p));
    out.set(n, u);
  };
  for (const key of new Set([...informed.keys(), ...assumed.keys()])) {
    const p = informed.get(key);
    if (p?.spec?.nodeName && podHoldsNode(p)) add(p, p.spec.nodeName);
    else if (assumed.has(key)) add(assumed.get(key)!.pod, assumed.get(key)!.node);
  }
  return out;
}

test('NodeUsage kept one event at a time equals the sums over every pod, whatever the order of events and assumptions', { timeout: 20_000 }, () => {
  const names = ['p0', 'p1', 'p2', 'p3', 'p4'];
  const nodes = ['a', 'b', 'c'];
  const op = fc.oneof(
    fc.record({ kind: fc.constant('observe' as const), verb: fc.constantFrom('add' as const, 'update' as const, 'delete' as const), name: fc.constantFrom(...names), node: fc.option(fc.constantFrom(...nodes), { nil: undefined }), mem: fc.constantFrom('64Ki', '1Mi'), port: fc.option(fc.constantFrom(80, 8080), { nil: undefined }), failed: fc.boolean() }),
    fc.record({ kind: fc.constant('assume' as const), name: fc.constantFrom(...names), node: fc.constantFrom(...nodes) }),
    fc.record({ kind: fc.constant('unassume' as const), name: fc.constantFrom(...names) }),
  );
  fc.assert(
    fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
      const usage = new NodeUsage();
      const informed = new Map<string, V1Pod>();
      const assumed = new Map<string, { pod: V1Pod; node: string }>();
      for (const o of ops) {
        const key = `default/${o.name}`;
        if (o.kind === 'observe') {
          const p = pod(o.name, { nodeName: o.node, memory: o.mem, ports: o.port ? [o.port] : undefined });
          if (o.failed) p.status = { phase: 'Failed' };
          usage.observe(o.verb, p);
          if (o.verb === 'delete') informed.delete(key);
          else informed.set(key, p);
        } else if (o.kind === 'assume') {
          const p = pod(o.name, { memory: '128Ki', ports: [9000] });
          usage.assume(key, p, o.node);
          assumed.set(key, { pod: p, node: o.node });
        } else {
          usage.unassume(key);
          assumed.delete(key);
        }
      }
      const want = bruteForce(informed, assumed);
      assert.deepEqual([...usage.nodes.keys()].sort(), [...want.keys()].sort());
      for (const [n, w] of want) {
        const got = usage.nodes.get(n)!;
        assert.equal(got.memory, w.memory);
        assert.equal(got.pods, w.pods);
        assert.deepEqual([...got.ports].sort(), [...new Set(w.ports)].sort());
      }
    }),
    { numRuns: 300 },
  );
});

test('workers binding at once never overfill a node: each decision is assumed before its bind is sent', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.nodes.set(node('a', { memory: '1Mi' }));
  cache.nodes.set(node('b', { memory: '1Mi' }));
  for (const n of ['p1', 'p2', 'p3']) cache.pods.set(pod(n, { memory: '768Ki' }));
  const usage = new NodeUsage();
  for (const p of cache.pods.items) usage.observe('add', p);
  const assumed = new AssumedPods(usage);
  const api = ctx.api;
  const { promise: release, resolve } = Promise.withResolvers<void>();
  ctx.api = new Proxy(api, {
    get: (target, op: keyof typeof api) =>
      op === 'bindPod'
        ? async (...args: Parameters<typeof api.bindPod>) => {
            await release; // every bind is in flight at once
            return target.bindPod(...args);
          }
        : target[op],
  });
  const all = Promise.all(['p1', 'p2', 'p3'].map((n) => reconcileSchedule(`default/${n}`, ctx, assumed)));
  resolve();
  const results = await all;
  const targets = fake.writes.filter((c) => c.op === 'bindPod').map((c) => c.args[3]);
  assert.deepEqual(targets.sort(), ['a', 'b']);
  assert.equal(results.filter((r) => r?.requeueAfterMs !== undefined).length, 1, 'the third is unschedulable for now');
  assert.equal(fake.writes.filter((c) => c.op === 'patchPodStatus').length, 1);
});

test('a failed bind forgets the assumption: the node counts the pod no more', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.nodes.set(node('a', { memory: '1Mi' }));
  cache.pods.set(pod('p1', { memory: '768Ki' }));
  const usage = new NodeUsage();
  const assumed = new AssumedPods(usage);
  const { ApiError } = await import('../../api/index.ts');
  fake.failures.set('bindPod', new ApiError('bind pod', 500, 'InternalError', 'etcd: no answer'));
  await assert.rejects(reconcileSchedule('default/p1', ctx, assumed), /etcd: no answer/);
  assert.equal(usage.nodes.get('a'), undefined);
  assert.equal(assumed.has('default/p1', ctx.clock.now()), false);
});
