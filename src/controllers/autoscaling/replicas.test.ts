import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  limitWithBehavior,
  limitWithoutBehavior,
  MetricsError,
  type PodSample,
  type Recommendation,
  resourceReplicas,
  type ResourceCalc,
  type ScalingRules,
  scaleDownLimit,
  scaleUpLimit,
  stabilize,
  stabilizeWithBehavior,
} from './replicas.ts';

const NOW = 10_000_000;
/** A Ready pod started long ago, requesting 100m, using `usage` milli-cores (none: no metrics). */
const pod = (name: string, usage: number | undefined, extra: Partial<PodSample> = {}): PodSample => ({
  name,
  ignored: false,
  pending: false,
  ready: true,
  readySinceMs: NOW - 3_600_000,
  startMs: NOW - 3_700_000,
  request: 100,
  ...(usage !== undefined ? { usage, metricAtMs: NOW, metricWindowMs: 15_000 } : {}),
  ...extra,
});
const calc = (currentReplicas: number, utilization = 50): ResourceCalc => ({
  currentReplicas,
  target: { utilization },
  tolerance: 0.1,
  cpuInitializationPeriodMs: 300_000,
  initialReadinessDelayMs: 30_000,
  nowMs: NOW,
  cpu: true,
});

test('desired is ceil(current × usage ratio): two pods at 150 % of a 50 % target ask for 6', () => {
  const a = resourceReplicas([pod('a', 150), pod('b', 150)], calc(2));
  assert.equal(a.replicas, 6);
  assert.equal(a.utilization, 150);
});

test('within the 10 % tolerance the replicas stay', () => {
  assert.equal(resourceReplicas([pod('a', 54), pod('b', 54)], calc(2)).replicas, 2);
  assert.equal(resourceReplicas([pod('a', 56), pod('b', 56)], calc(2)).replicas, 3);
});

test('an idle Deployment asks for fewer pods', () => {
  assert.equal(resourceReplicas([pod('a', 10), pod('b', 10), pod('c', 10)], calc(3)).replicas, 1);
});

test('a pod without metrics counts as using its whole request when scaling down', () => {
  // The ready pods at 20 % would ask for 1; with the missing one at 100 %: (20+20+100)/300 = 46 %, within the tolerance: keep 3.
  const a = resourceReplicas([pod('a', 20), pod('b', 20), pod('c', undefined)], calc(3));
  assert.equal(a.replicas, 3);
});

test('a pod without metrics counts as using nothing when scaling up', () => {
  // 200 % on one pod, nothing on the other: 100 % over two pods → ratio 2 → 4.
  assert.equal(resourceReplicas([pod('a', 200), pod('b', undefined)], calc(2)).replicas, 4);
});

test('unready pods count as using nothing when scaling up, and are left out otherwise', () => {
  const young = { startMs: NOW - 10_000, readySinceMs: NOW - 5_000 };
  // b's metrics predate one window after it became Ready: unready.
  assert.equal(resourceReplicas([pod('a', 200), pod('b', 500, young)], calc(2)).replicas, 4);
  assert.equal(resourceReplicas([pod('a', 10), pod('b', 500, young)], calc(2)).replicas, 1);
});

test('deleted and failed pods are ignored; Pending ones are unready', () => {
  const a = resourceReplicas([pod('a', 100), pod('gone', 900, { ignored: true }), pod('p', undefined, { pending: true })], calc(3));
  // a at 100 % asks to scale up; with the Pending p as nothing: (100+0)/200 = 50 %, the target: keep 3.
  assert.equal(a.replicas, 3);
});

test('a pod without a CPU request, or no pod with metrics, is a MetricsError', () => {
  assert.throws(() => resourceReplicas([pod('a', 10, { request: undefined })], calc(1)), (e: unknown) => e instanceof MetricsError && /missing request for cpu in pod a/.test(e.message));
  assert.throws(() => resourceReplicas([pod('a', undefined)], calc(1)), /did not receive metrics for targeted pods/);
});

test('an AverageValue target divides the average usage by it', () => {
  const o = { ...calc(2), target: { averageValue: 100 } };
  assert.equal(resourceReplicas([pod('a', 300), pod('b', 100)], o).replicas, 4);
});

test('without behavior: the highest recommendation of the downscale window', () => {
  const h: Recommendation[] = [];
  assert.equal(stabilize(h, 5, NOW - 200_000, 300_000), 5);
  assert.equal(stabilize(h, 2, NOW - 100_000, 300_000), 5);
  assert.equal(stabilize(h, 1, NOW + 150_000, 300_000), 2); // the 5 is out of the window
  assert.equal(h.length, 2);
});

test('without behavior: at most max(2 × current, 4), within min and max', () => {
  assert.deepEqual(limitWithoutBehavior(1, 10, 1, 20), { desired: 4, limited: true, reason: 'ScaleUpLimit', message: 'the desired replica count is increasing faster than the maximum scale rate' });
  assert.equal(limitWithoutBehavior(1, 10, 1, 3).reason, 'TooManyReplicas');
  assert.equal(limitWithoutBehavior(1, 10, 1, 3).desired, 3);
  assert.equal(limitWithoutBehavior(3, 0, 1, 5).reason, 'TooFewReplicas');
  assert.equal(limitWithoutBehavior(3, 4, 1, 5).reason, 'DesiredWithinRange');
});

const up: ScalingRules = { stabilizationWindowSeconds: 0, selectPolicy: 'Max', policies: [{ type: 'Pods', value: 4, periodSeconds: 15 }, { type: 'Percent', value: 100, periodSeconds: 15 }] };
const down: ScalingRules = { stabilizationWindowSeconds: 300, selectPolicy: 'Max', policies: [{ type: 'Percent', value: 100, periodSeconds: 15 }] };

test('with behavior: the scale-up window\'s lowest and the scale-down window\'s highest bound the replicas', () => {
  const h: Recommendation[] = [{ atMs: NOW - 60_000, replicas: 8 }];
  assert.equal(stabilizeWithBehavior(h, 4, 2, NOW, up, down), 4); // down held by the 8 of a minute ago: stays at current
  const slowUp = { ...up, stabilizationWindowSeconds: 120 };
  const h2: Recommendation[] = [{ atMs: NOW - 60_000, replicas: 3 }];
  assert.equal(stabilizeWithBehavior(h2, 2, 9, NOW, slowUp, down), 3);
});

test('with behavior: the policies\' rate over their periods', () => {
  // Max of +4 pods and +100 %: from 10, 20.
  assert.equal(scaleUpLimit(10, [], [], up, NOW), 20);
  // 6 added 10 s ago: the period began at 4, so 8.
  assert.equal(scaleUpLimit(10, [{ atMs: NOW - 10_000, change: 6 }], [], up, NOW), 8);
  assert.equal(scaleDownLimit(10, [], [], { ...down, policies: [{ type: 'Pods', value: 2, periodSeconds: 60 }] }, NOW), 8);
  assert.equal(scaleUpLimit(10, [], [], { ...up, selectPolicy: 'Disabled' }, NOW), 10);
  assert.deepEqual(limitWithBehavior(10, 30, 1, 50, [], [], up, down, NOW).reason, 'ScaleUpLimit');
  assert.deepEqual(limitWithBehavior(10, 30, 1, 15, [], [], up, down, NOW).desired, 15);
  const slowDown = { ...down, policies: [{ type: 'Pods' as const, value: 1, periodSeconds: 60 }] };
  assert.deepEqual(limitWithBehavior(10, 2, 1, 15, [], [], up, slowDown, NOW), { desired: 9, limited: true, reason: 'ScaleDownLimit', message: 'the desired replica count is decreasing faster than the maximum scale rate' });
});
