/**
 * A checkpoint of an app pod (its module has an entry point) is refused with 409 NotMovable and its
 * blocker whatever its container's state (issue 19 "Seed and operator details"): while the container
 * waits to restart, the answer was 404 "not running", which a caller reads as a pod gone.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { readBytes } from '../../src/api/index.ts';
import { buildWat, startCluster } from './cluster.ts';

test('a checkpoint of an app pod is 409 with its blocker while its container waits to restart', { timeout: 180_000 }, async (t) => {
  const c = await startCluster(t);
  await c.startWorker('w1', '127.0.0.2');
  const bytes = buildWat('app-exit', c.tmp);
  await c.admin.json('PUT', '/apis/kube32.io/v1/modules/app-exit/data', { body: bytes, contentType: 'application/octet-stream' });
  const pod: V1Pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'app', namespace: 'default' },
    spec: { nodeName: 'w1', restartPolicy: 'Always', containers: [{ name: 'c', image: 'wasm://app-exit', resources: { limits: { memory: '64Ki' } } }] },
  };
  await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: pod });
  // Its _start returned: the container completed and waits for its restart (back-off).
  await c.until('the app container to wait for a restart', async () => {
    const s = (await c.getPod('app'))?.status?.containerStatuses?.[0];
    return (s?.restartCount ?? 0) >= 1 && s?.state?.waiting?.reason === 'CrashLoopBackOff';
  }, 60_000);
  const res = await c.admin.request('POST', '/api/v1/nodes/w1/proxy/checkpoint/default/app/c');
  const body = JSON.parse((await readBytes(res.body)).toString()) as { reason: string; blockers: string[]; message: string };
  assert.equal(res.status, 409, JSON.stringify(body));
  assert.equal(body.reason, 'NotMovable');
  assert.deepEqual(body.blockers, ['entry point _start runs on its own thread']);
  assert.match(body.message, /^pod default\/app cannot move: entry point _start runs on its own thread$/);
});
