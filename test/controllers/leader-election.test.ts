/**
 * Leader election: two sets of controllers against one API server; only the Lease holder schedules, and
 * when it stops (releasing the Lease) the other takes over at once.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { pino } from 'pino';
import { startControllers } from '../../src/controllers/index.ts';
import { RestClient } from '../../src/api/index.ts';
import { startApiServer } from '../helpers/apiserver.ts';
import { waitFor } from '../helpers/wait.ts';

interface Lease {
  spec?: { holderIdentity?: string; leaseTransitions?: number };
}

test('only the Lease holder acts; a clean stop hands the Lease over', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t);
  const rest = new RestClient(api.kubeConfig);
  t.after(() => rest.close());
  const log = pino({ level: process.env.LOG_LEVEL ?? 'error' }, pino.destination({ dest: 2, sync: true }));
  // A clean stop empties the holder, so the successor takes the Lease within a retry period whatever the
  // duration; a long duration keeps cp-b from taking it while cp-a lives but its process (both run in this
  // one) was held up for a few seconds by a loaded machine.
  const le = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 200 };
  const a = await startControllers({ kubeConfig: api.kubeConfig, log, leaderElection: { ...le, identity: 'cp-a' } });
  t.after(() => a.stop());
  const until = <T>(what: string, fn: () => Promise<T | undefined | false>, ms = 15_000): Promise<T> => waitFor(what, ms, fn);
  const leasePath = '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube32-controllers';
  await until('cp-a to hold the Lease', async () => (await rest.json<Lease>({ method: 'GET', path: leasePath })).spec?.holderIdentity === 'cp-a');
  const b = await startControllers({ kubeConfig: api.kubeConfig, log, leaderElection: { ...le, identity: 'cp-b' } });
  t.after(() => b.stop());

  // A Ready node without a kubelet, so that scheduling shows who acts.
  await rest.json({ method: 'POST', path: '/api/v1/nodes', body: { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' } } });
  await rest.json({
    method: 'PATCH',
    path: '/api/v1/nodes/n1/status',
    contentType: 'application/merge-patch+json',
    body: { status: { allocatable: { memory: '1Mi', pods: '10' }, conditions: [{ type: 'Ready', status: 'True' }] } },
  });
  const pod = (name: string): V1Pod => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'default' }, spec: { containers: [{ name: 'c', image: `kube32.io/wasm-sha256:${'0'.repeat(64)}` }] } });
  const boundTo = async (name: string) => (await rest.json<V1Pod>({ method: 'GET', path: `/api/v1/namespaces/default/pods/${name}` })).spec?.nodeName;
  await rest.json({ method: 'POST', path: '/api/v1/namespaces/default/pods', body: pod('p1') });
  assert.equal(await until('p1 bound', () => boundTo('p1')), 'n1');
  assert.equal((await rest.json<Lease>({ method: 'GET', path: leasePath })).spec?.holderIdentity, 'cp-a', 'cp-b only waits');

  await a.stop();
  const lease = await until('cp-b to take the Lease', async () => {
    const l = await rest.json<Lease>({ method: 'GET', path: leasePath });
    return l.spec?.holderIdentity === 'cp-b' ? l : undefined;
  }, 5000);
  assert.equal(lease.spec?.leaseTransitions, 1);
  await rest.json({ method: 'POST', path: '/api/v1/namespaces/default/pods', body: pod('p2') });
  assert.equal(await until('p2 bound by cp-b', () => boundTo('p2')), 'n1');
});

test('a Lease whose holder stopped renewing is taken once it expires, by the candidate clock', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t);
  const rest = new RestClient(api.kubeConfig);
  t.after(() => rest.close());
  const leasePath = '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases';
  await rest.json({
    method: 'POST',
    path: leasePath,
    body: {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: 'kube32-controllers', namespace: 'kube-system' },
      // A renew time in the future: only the observer's clock can tell that it stopped.
      spec: { holderIdentity: 'crashed', leaseDurationSeconds: 2, renewTime: '2099-01-01T00:00:00.000000Z', leaseTransitions: 3 },
    },
  });
  const log = pino({ level: process.env.LOG_LEVEL ?? 'error' }, pino.destination({ dest: 2, sync: true }));
  const started = Date.now();
  const c = await startControllers({ kubeConfig: api.kubeConfig, log, leaderElection: { identity: 'cp-c', leaseDurationMs: 2000, renewDeadlineMs: 1500, retryPeriodMs: 100 } });
  t.after(() => c.stop());
  let holder = '';
  let transitions = 0;
  while (Date.now() - started < 30_000) { // a bound on a hang: cp-c takes it about 2 s after its start
    const l = await rest.json<Lease>({ method: 'GET', path: `${leasePath}/kube32-controllers` });
    holder = l.spec?.holderIdentity ?? '';
    transitions = l.spec?.leaseTransitions ?? 0;
    if (holder === 'cp-c') break;
    await new Promise((r) => setTimeout(r, 50)); // polling a condition with a deadline
  }
  assert.equal(holder, 'cp-c');
  assert.equal(transitions, 4);
  assert.ok(Date.now() - started >= 1900, 'not before the lease duration has passed unchanged');
});
