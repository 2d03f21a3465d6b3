import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { V1Pod } from '@kubernetes/client-node';
import { podSpecBlockers } from './spec-blockers.ts';

function pod(spec: Partial<NonNullable<V1Pod['spec']>>, annotations?: Record<string, string>): V1Pod {
  return { metadata: { name: 'p', namespace: 'default', annotations }, spec: { containers: [], ...spec } };
}

test('a plain request pod has no spec blockers', () => {
  assert.deepEqual(podSpecBlockers(pod({ containers: [{ name: 'c', image: 'wasm://echo', resources: { limits: { memory: '64Ki', 'hardware.kube32.io/ipc': '1' } } }] })), []);
});

test('every spec blocker is listed with the seed text, in the seed order', () => {
  const p = pod(
    {
      containers: [
        {
          name: 'c',
          image: 'wasm://x',
          resources: { requests: { 'esp32.io/gpio': '1' }, limits: { 'hardware.kube32.io/display': '1', 'esp32.io/gpio': '1', 'kube32.io/i2c-device': '1' } },
          securityContext: { capabilities: { add: ['SPEAKER', 'NET_ADMIN', 'CAP_DISPLAY'] } },
        },
      ],
      volumes: [
        { name: 'data', persistentVolumeClaim: { claimName: 'data-claim' } },
        { name: 'card', csi: { driver: 'kube32.io/sd' } },
        { name: 'cfg', configMap: { name: 'cfg' } },
      ],
    },
    { 'kube32.io/migration': 'Never' },
  );
  assert.deepEqual(podSpecBlockers(p, { entryPoint: '_start' }), [
    'grant esp32.io/gpio',
    'grant hardware.kube32.io/display',
    'grant capability SPEAKER',
    'grant capability DISPLAY',
    'grant kube32.io/i2c-device',
    'volume claim data-claim on node storage',
    'volume claim card on node storage',
    'annotation kube32.io/migration: Never',
    'entry point _start runs on its own thread',
  ]);
});

test('the I2C grant annotation alone blocks; OnDrain and Auto do not', () => {
  assert.deepEqual(podSpecBlockers(pod({}, { 'kube32.io/i2c-device': 'bus0/0x3c' })), ['grant kube32.io/i2c-device']);
  assert.deepEqual(podSpecBlockers(pod({}, { 'kube32.io/migration': 'Auto' })), []);
  assert.deepEqual(podSpecBlockers(pod({}, { 'kube32.io/migration': 'OnDrain' })), []);
});
