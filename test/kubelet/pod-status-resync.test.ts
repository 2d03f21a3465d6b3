/**
 * The worker puts right a pod status someone else overwrote, as the kubelet's status manager does:
 * `kubectl patch pod --subresource=status` to a phase of nonsense, and the pod is Running and Ready again
 * (checked with kubectl) within a bounded wait. A real API server, a real kube32-sim, the real kubectl.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { claimLoopbackRange } from '../helpers/ports.ts';
import { fixturePod, freePort, startCluster } from './cluster.ts';

test('a pod status overwritten with kubectl patch --subresource=status is written again by its worker', { timeout: 120_000 }, async (t) => {
  const c = await startCluster(t);
  const address = `${await claimLoopbackRange()}.2`;
  const port = await freePort(address);
  await c.startWorker('r1', address, ['--interp-mops', '1000']);
  await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('steady', 'r1', port) });
  const shape = 'jsonpath={.status.phase} {.status.conditions[?(@.type=="Ready")].status} {.status.podIP} {.status.containerStatuses[0].ready}';
  const get = async () => {
    const r = await c.kubectl(['get', 'pod', 'steady', '-o', shape]);
    assert.equal(r.code, 0, r.stderr);
    return r.stdout;
  };
  const healthy = `Running True ${address} true`;
  await c.until('steady Running and Ready', async () => (await get()) === healthy, 30_000);

  const patched = await c.kubectl(['patch', 'pod', 'steady', '--subresource=status', '--type=merge', '-p', '{"status":{"phase":"Bogus"}}']);
  assert.equal(patched.code, 0, patched.stderr);
  assert.match(patched.stdout, /patched/);
  await c.until('steady Running and Ready again after the Bogus phase', async () => (await get()) === healthy, 20_000);

  // Conditions, the pod's IP and its start time overwritten too (a merge patch replaces the whole conditions list).
  const times = async () => (await c.kubectl(['get', 'pod', 'steady', '-o', 'jsonpath={.status.startTime} {.status.conditions[*].type}'])).stdout;
  const before = await times();
  assert.match(before, /^\S+Z PodReadyToStartContainers Initialized Ready ContainersReady PodScheduled$/);
  const again = await c.kubectl(['patch', 'pod', 'steady', '--subresource=status', '--type=merge', '-p',
    '{"status":{"podIP":"10.9.9.9","startTime":"2000-01-01T00:00:00Z","conditions":[{"type":"Ready","status":"False","reason":"Bogus"}]}}']);
  assert.equal(again.code, 0, again.stderr);
  await c.until('steady Ready with its own podIP, start time and conditions again', async () => (await get()) === healthy && (await times()) === before, 20_000);
});
