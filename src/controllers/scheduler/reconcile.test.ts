import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fakeContext, node, pod } from '../testing/fakes.ts';
import { pickNode } from '../../api/index.ts';
import { AssumedPods, reconcileSchedule } from './reconcile.ts';

test('a pending pod is bound to the node with the most free memory, with a Scheduled event', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.nodes.set(node('small', { memory: '1Mi' }));
  cache.nodes.set(node('big', { memory: '8Mi' }));
  cache.pods.set(pod('echo', { memory: '256Ki' }));
  await reconcileSchedule('default/echo', ctx, new AssumedPods());
  assert.deepEqual(fake.writes, [{ op: 'bindPod', args: ['default', 'echo', 'uid-echo', 'big'] }]);
  assert.deepEqual(fake.eventReasons, ['Scheduled']);
});

test('a burst does not overfill a node: bound pods are assumed until the cache shows them', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.nodes.set(node('a', { memory: '1Mi' }));
  cache.nodes.set(node('b', { memory: '1Mi' }));
  cache.pods.set(pod('p1', { memory: '768Ki' }));
  cache.pods.set(pod('p2', { memory: '768Ki' }));
  const assumed = new AssumedPods();
  await reconcileSchedule('default/p1', ctx, assumed);
  await reconcileSchedule('default/p2', ctx, assumed);
  const targets = fake.writes.map((c) => c.args[3]);
  assert.deepEqual(targets.sort(), ['a', 'b']);
});

test('when nothing fits, PodScheduled=False Unschedulable names every reason and the pod is tried again later', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.nodes.set(node('cordoned', { unschedulable: true }));
  cache.nodes.set(node('down', { ready: 'Unknown' }));
  cache.nodes.set(node('tiny', { memory: '64Ki' }));
  cache.nodes.set(node('other', { labels: { zone: 'a' } }));
  const p = pod('big', { memory: '1Mi' });
  p.spec!.nodeSelector = { zone: 'b' };
  cache.pods.set(p);
  cache.nodes.set(node('tiny', { memory: '64Ki', labels: { zone: 'b' } }));
  const res = await reconcileSchedule('default/big', ctx, new AssumedPods());
  assert.equal(res?.requeueAfterMs, ctx.timings.unschedulableRetryMs);
  assert.equal(fake.writes.length, 1);
  assert.equal(fake.writes[0]!.op, 'patchPodStatus');
  const cond = (fake.writes[0]!.args[2] as { status: { conditions: Array<{ type: string; status: string; reason: string; message: string }> } }).status.conditions[0]!;
  assert.equal(cond.type, 'PodScheduled');
  assert.equal(cond.status, 'False');
  assert.equal(cond.reason, 'Unschedulable');
  assert.equal(
    cond.message,
    "0/4 nodes are available: 1 Insufficient memory, 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) were not ready, 1 node(s) were unschedulable.",
  );
  assert.deepEqual(fake.eventReasons, ['FailedScheduling']);
});

test('pods share the node address: a second pod with the same containerPort goes elsewhere', () => {
  const a = node('a');
  const b = node('b', { memory: '1Mi' });
  const running = pod('web1', { nodeName: 'a', running: true, ports: [8080] });
  const placement = pickNode(pod('web2', { ports: [8080] }), [a, b], [running]);
  assert.deepEqual(placement, { nodeName: 'b' });
  const none = pickNode(pod('web3', { ports: [8080] }), [a], [running]);
  assert.match(String((none as { message: string }).message), /free ports/);
  // A pod being deleted still runs, holding its port, until its node stops it; a Succeeded one does not.
  const terminating = { ...running, metadata: { ...running.metadata, deletionTimestamp: new Date() } };
  assert.match(String((pickNode(pod('web4', { ports: [8080] }), [a], [terminating]) as { message: string }).message), /free ports/);
  const done = { ...running, status: { ...running.status, phase: 'Succeeded' } };
  assert.deepEqual(pickNode(pod('web5', { ports: [8080] }), [a], [done]), { nodeName: 'a' });
});

test('kube32.io/placement: fastest picks the highest interp-mops', () => {
  const nodes = [node('slow', { mops: 7, memory: '64Mi' }), node('fast', { mops: 1500, memory: '1Mi' })];
  const p = pod('calc', { annotations: { 'kube32.io/placement': 'fastest' } });
  assert.deepEqual(pickNode(p, nodes, []), { nodeName: 'fast' });
  assert.deepEqual(pickNode(pod('plain'), nodes, []), { nodeName: 'slow' });
});

test('untolerated NoSchedule taints exclude a node; a toleration admits it', () => {
  const t = node('t', { taints: [{ key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule' }] });
  const p = pod('x');
  assert.match(String((pickNode(p, [t], []) as { message: string }).message), /untolerated taint \{node.kubernetes.io\/unreachable: \}/);
  p.spec!.tolerations = [{ key: 'node.kubernetes.io/unreachable', operator: 'Exists' }];
  assert.deepEqual(pickNode(p, [t], []), { nodeName: 't' });
});

test('a bound, deleted or foreign-scheduler pod is left alone', { timeout: 5000 }, async () => {
  const { ctx, cache, fake } = fakeContext();
  cache.nodes.set(node('a'));
  cache.pods.set(pod('bound', { nodeName: 'a' }));
  const other = pod('other');
  other.spec!.schedulerName = 'my-scheduler';
  cache.pods.set(other);
  await reconcileSchedule('default/bound', ctx, new AssumedPods());
  await reconcileSchedule('default/other', ctx, new AssumedPods());
  await reconcileSchedule('default/gone', ctx, new AssumedPods());
  assert.deepEqual(fake.calls, []);
});

test('required node affinity: terms are ORed, expressions ANDed (In, NotIn, Exists, DoesNotExist, Gt, Lt, matchFields)', () => {
  const nodes = [
    node('a', { labels: { zone: 'x', gen: '3' } }),
    node('b', { labels: { zone: 'y', gen: '5', gpu: 'yes' } }),
    node('c', { labels: { zone: 'z' } }),
  ];
  const p = pod('aff');
  const withTerms = (terms: object[]) => {
    p.spec!.affinity = { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: terms as never } } };
    return pickNode(p, nodes, []);
  };
  assert.deepEqual(withTerms([{ matchExpressions: [{ key: 'zone', operator: 'In', values: ['y'] }] }]), { nodeName: 'b' });
  assert.deepEqual(withTerms([{ matchExpressions: [{ key: 'gen', operator: 'Gt', values: ['4'] }, { key: 'gpu', operator: 'Exists' }] }]), { nodeName: 'b' });
  assert.deepEqual(withTerms([{ matchExpressions: [{ key: 'gen', operator: 'Lt', values: ['4'] }] }]), { nodeName: 'a' });
  assert.deepEqual(withTerms([{ matchExpressions: [{ key: 'gen', operator: 'DoesNotExist' }] }]), { nodeName: 'c' });
  assert.deepEqual(withTerms([{ matchExpressions: [{ key: 'zone', operator: 'NotIn', values: ['x', 'y'] }] }]), { nodeName: 'c' });
  assert.deepEqual(withTerms([{ matchFields: [{ key: 'metadata.name', operator: 'In', values: ['a'] }] }]), { nodeName: 'a' });
  const none = withTerms([{ matchExpressions: [{ key: 'zone', operator: 'In', values: ['q'] }] }, { matchExpressions: [{ key: 'gpu', operator: 'DoesNotExist' }, { key: 'zone', operator: 'In', values: ['y'] }] }]);
  assert.equal((none as { message: string }).message, "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.");
});

test('the Scheduled event carries the time of the decision, in whole seconds as the kubelet stamps its events, not the time after a slow bind', { timeout: 5000 }, async () => {
  const { ctx, cache, fake, clock } = fakeContext();
  cache.nodes.set(node('a'));
  cache.pods.set(pod('echo'));
  clock.advance(900); // the decision at hh:mm:ss.900
  const decidedAt = clock.now();
  const api = ctx.api;
  ctx.api = new Proxy(api, {
    get: (target, op: keyof typeof api) =>
      op === 'bindPod'
        ? async (...args: Parameters<typeof api.bindPod>) => {
            clock.advance(1500); // a slow bind: the kubelet already runs the pod meanwhile
            return target.bindPod(...args);
          }
        : target[op],
  });
  await reconcileSchedule('default/echo', ctx, new AssumedPods());
  const scheduled = fake.events.find((e) => e.reason === 'Scheduled')!;
  const expected = new Date(Math.floor(decidedAt / 1000) * 1000).toISOString().replace('.000Z', 'Z');
  assert.equal(scheduled.firstTimestamp, expected);
  assert.equal((scheduled as unknown as { lastTimestamp: string }).lastTimestamp, expected);
});
