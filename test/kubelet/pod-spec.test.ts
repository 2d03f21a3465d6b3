/**
 * The kubelet's reading of a pod's `kube32.io/tick-interval` annotation: what a container is started
 * with, and the CreateContainerConfigError message for a value it cannot run.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { ContainerConfigError, tickIntervalMs } from '../../src/kubelet/pod-spec.ts';

const pod = (interval: string): V1Pod => ({ metadata: { name: 'p', annotations: { 'kube32.io/tick-interval': interval } } });

test('kube32.io/tick-interval: a duration from 1ms to 596h31m23.647s; below, above (it ticked every 1 ms) or not a duration is a ContainerConfigError', () => {
  assert.equal(tickIntervalMs({ metadata: { name: 'p' } }), undefined);
  assert.equal(tickIntervalMs(pod('500ms')), 500);
  assert.equal(tickIntervalMs(pod('596h31m23.647s')), 2 ** 31 - 1);
  const refused: [string, RegExp][] = [
    ['0s', /^annotation kube32\.io\/tick-interval: below 1ms$/],
    ['forever', /^annotation kube32\.io\/tick-interval: invalid duration "forever"/],
    ['1000h', /^annotation kube32\.io\/tick-interval: duration "1000h" is too long: at most 596h31m23\.647s \(2147483647 ms\)$/],
    ['596h31m23.648s', /too long/],
  ];
  for (const [value, message] of refused) {
    assert.throws(() => tickIntervalMs(pod(value)), (err: unknown) => err instanceof ContainerConfigError && message.test(err.message), value);
  }
});
