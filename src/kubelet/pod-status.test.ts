import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { V1Pod } from '@kubernetes/client-node';
import { buildPodStatus, crashBackoff, ownedStatusText, podPhase, type ContainerView } from './index.ts';
import { parseLabels } from './main.ts';

const pod: V1Pod = {
  metadata: { name: 'p', namespace: 'default', uid: 'u1' },
  spec: { containers: [{ name: 'c', image: 'wasm://echo', resources: { limits: { memory: '64Ki' } } }] },
  status: { phase: 'Pending', conditions: [{ type: 'PodScheduled', status: 'True', lastTransitionTime: '2026-01-01T00:00:00Z' as unknown as Date }] },
};

function view(over: Partial<ContainerView>): ContainerView {
  return { name: 'c', image: 'wasm://echo', imageID: 'sha256:ab', containerID: 'kube32://u1-c-0', state: { kind: 'waiting', reason: 'ContainerCreating' }, restartCount: 0, frozen: false, final: false, ...over };
}

test('a container being created keeps the pod Pending and not Ready', () => {
  const s = buildPodStatus(pod, [view({})], '127.0.0.2', Date.now());
  assert.equal(s.phase, 'Pending');
  assert.equal(s.podIP, '127.0.0.2');
  assert.equal(s.hostIP, '127.0.0.2');
  assert.equal(s.conditions?.find((c) => c.type === 'Ready')?.status, 'False');
  assert.equal(s.conditions?.find((c) => c.type === 'Ready')?.reason, 'ContainersNotReady');
  assert.equal(s.conditions?.find((c) => c.type === 'PodScheduled')?.lastTransitionTime, '2026-01-01T00:00:00Z');
  assert.deepEqual(s.containerStatuses?.[0]?.state, { waiting: { reason: 'ContainerCreating' } });
});

test('a running container makes the pod Running and Ready; frozen makes it not Ready', () => {
  const running = buildPodStatus(pod, [view({ state: { kind: 'running', startedAt: Date.now() } })], '127.0.0.2', Date.now());
  assert.equal(running.phase, 'Running');
  assert.equal(running.conditions?.find((c) => c.type === 'Ready')?.status, 'True');
  assert.equal(running.containerStatuses?.[0]?.ready, true);
  assert.equal(running.containerStatuses?.[0]?.started, true);
  const frozen = buildPodStatus(pod, [view({ state: { kind: 'running', startedAt: Date.now() }, frozen: true })], '127.0.0.2', Date.now());
  assert.equal(frozen.phase, 'Running');
  assert.equal(frozen.conditions?.find((c) => c.type === 'Ready')?.status, 'False');
  assert.equal(frozen.containerStatuses?.[0]?.ready, false);
});

test('a crash loop stays Running with lastState; a final RestoreError is Failed; a clean end is Succeeded', () => {
  const trap = { kind: 'terminated' as const, reason: 'Trap', message: 'unreachable', exitCode: 1, startedAt: 1000, finishedAt: 2000 };
  const loop = buildPodStatus(pod, [view({ state: { kind: 'waiting', reason: 'CrashLoopBackOff', message: 'back-off 10s' }, lastState: trap, restartCount: 1 })], 'a', 0);
  assert.equal(loop.phase, 'Running');
  assert.equal(loop.containerStatuses?.[0]?.lastState?.terminated?.reason, 'Trap');
  assert.equal(loop.containerStatuses?.[0]?.restartCount, 1);
  const restore = { kind: 'terminated' as const, reason: 'RestoreError', message: 'cannot restore the snapshot: x', exitCode: 1, startedAt: 1000, finishedAt: 2000 };
  assert.equal(podPhase([view({ state: restore, final: true })]), 'Failed');
  assert.equal(podPhase([view({ state: { ...restore, reason: 'Completed', exitCode: 0 }, final: true })]), 'Succeeded');
  const failed = buildPodStatus(pod, [view({ state: restore, final: true })], 'a', 0);
  assert.equal(failed.conditions?.find((c) => c.type === 'Ready')?.reason, 'PodCompleted');
  assert.equal(failed.containerStatuses?.[0]?.state?.terminated?.reason, 'RestoreError');
});

test('--labels parses key=value pairs and names a bad one', () => {
  assert.deepEqual(parseLabels('zone=a, kube32.io/board=sim'), { zone: 'a', 'kube32.io/board': 'sim' });
  assert.throws(() => parseLabels('zone'), /"zone" is not one/);
});

test('crash back-off: at once, then 10 s doubling to 5 min; reset after 10 min of running', () => {
  let current = 0;
  const delays: number[] = [];
  for (let i = 0; i < 8; i++) {
    const step = crashBackoff(current, 1000);
    delays.push(step.delay);
    current = step.next;
  }
  assert.deepEqual(delays, [0, 10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000]);
  assert.deepEqual(crashBackoff(300_000, 600_000), { delay: 0, next: 10_000 });
});

test('ownedStatusText: a phase someone overwrote differs; condition times, key order and other components\' conditions do not', () => {
  const owned = buildPodStatus(pod, [view({ state: { kind: 'running', startedAt: Date.now() } })], '127.0.0.2', Date.now());
  const same = ownedStatusText(owned, owned);
  const reordered = Object.fromEntries(Object.entries(owned).reverse()) as typeof owned;
  const retimed = { ...reordered, conditions: [...(owned.conditions ?? []).map((c) => ({ ...c, lastTransitionTime: '2020-01-01T00:00:00Z' as unknown as Date })), { type: 'DisruptionTarget', status: 'True' }], nominatedNodeName: 'x' };
  assert.equal(ownedStatusText(retimed, owned), same);
  assert.notEqual(ownedStatusText({ ...owned, phase: 'Bogus' }, owned), same);
  assert.notEqual(ownedStatusText({ ...owned, conditions: owned.conditions?.filter((c) => c.type !== 'Ready') }, owned), same);
  assert.notEqual(ownedStatusText({ ...owned, podIP: '10.0.0.1' }, owned), same);
  assert.notEqual(ownedStatusText({ ...owned, containerStatuses: [] }, owned), same);
  assert.notEqual(ownedStatusText(undefined, owned), same);
});
