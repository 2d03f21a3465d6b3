/**
 * The node's Lease guards the node (issue: a second kube32-sim with the `--name` of a running worker took
 * the node over, ran its pods twice, and on exit cordoned the node and evicted the real worker's pods).
 * Real kube32-sim processes and a real API server; what is checked is what a user sees: the second
 * worker's exit status and message, the Node, the Lease, the pod (with kubectl) and its count.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1Lease, V1Node } from '@kubernetes/client-node';
import { fetch } from 'undici';
import { claimLoopbackRange } from '../helpers/ports.ts';
import { fixturePod, freePort, startCluster, type Worker } from './cluster.ts';

const LEASE = '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1';

async function count(address: string, port: number): Promise<number> {
  const res = await fetch(`http://${address}:${port}/count`, { signal: AbortSignal.timeout(10_000) });
  assert.equal(res.status, 200);
  return ((await res.json()) as { count: number }).count;
}

function holderOf(w: Worker): string {
  return readFileSync(join(w.dataDir, 'lease-holder-identity'), 'utf8').trim();
}

test('a node\'s Lease: a second worker of the same name refuses, a restart from the data dir comes back, a worker that lost the Lease leaves the node alone, an expired Lease is taken over', { timeout: 240_000 }, async (t) => {
  const c = await startCluster(t);
  const prefix = await claimLoopbackRange();
  const [a1, a2] = [`${prefix}.2`, `${prefix}.3`];
  const port = await freePort([a1, a2]);
  const mops = ['--interp-mops', '1000'];
  let w1 = await c.startWorker('n1', a1, mops);
  const holder = (await c.admin.json<V1Lease>('GET', LEASE)).spec?.holderIdentity ?? '';

  await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: fixturePod('held', 'n1', port) });
  const running = await c.until('held Running on n1', async () => {
    const p = await c.getPod('held');
    return p?.status?.phase === 'Running' && p.status.podIP === a1 ? p : undefined;
  }, 30_000);
  assert.equal(await count(a1, port), 1);

  await t.test('a second kube32-sim with --name n1 and another data dir exits 1 and says who holds the node', async () => {
    const impostorDir = join(c.tmp, 'impostor');
    const second = await c.spawnWorker('n1', a2, mops, { dataDir: impostorDir });
    const code = await c.until('the second n1 to exit', () => (second.proc.exitCode === null ? undefined : second.proc.exitCode), 30_000);
    assert.equal(code, 1, second.stderr().slice(-2000));
    assert.match(second.stderr(), new RegExp(`kube32-sim: node n1: the node is held by another worker: its Lease kube-node-lease/n1 names holder "${holder}", renewed \\d+ s ago`));
    assert.doesNotMatch(second.stdout(), /ready:/);
    assert.ok(!existsSync(join(impostorDir, 'pods', running.metadata?.uid ?? '')), 'the second worker ran none of the node\'s pods');
    // Nothing of the node changed: the Lease, the Node, the pod and its count.
    assert.equal((await c.admin.json<V1Lease>('GET', LEASE)).spec?.holderIdentity, holder);
    const node = await c.admin.json<V1Node>('GET', '/api/v1/nodes/n1');
    assert.notEqual(node.spec?.unschedulable, true);
    assert.equal(node.metadata?.annotations?.['kube32.io/left'], undefined);
    assert.equal(node.status?.addresses?.find((a) => a.type === 'InternalIP')?.address, a1);
    const r = await c.kubectl(['get', 'pod', 'held', '-o', 'jsonpath={.metadata.uid} {.status.phase} {.status.podIP}']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `${running.metadata?.uid} Running ${a1}`);
    assert.equal(await count(a1, port), 2, 'the pod runs on, its count kept');
  });

  await t.test('the same worker restarted at once from its data dir holds its Lease again', async () => {
    assert.match(holder, /^[a-z0-9.-]+_[0-9a-f-]{36}$/, 'a holder identity of its own');
    assert.equal(holderOf(w1), holder, 'kept in the data dir');
    w1.proc.kill('SIGKILL');
    await w1.exited;
    // Its Lease was renewed within the last 10 s: only its own holder identity may take it now.
    w1 = await c.startWorker('n1', a1, mops);
    assert.equal(holderOf(w1), holder);
    assert.equal((await c.admin.json<V1Lease>('GET', LEASE)).spec?.holderIdentity, holder);
    await c.until('held Running on n1 again', async () => {
      const p = await c.getPod('held');
      return p !== undefined && p.metadata?.uid === running.metadata?.uid && p.status?.phase === 'Running' && p.status.containerStatuses?.[0]?.ready ? p : undefined;
    }, 30_000);
    assert.equal(await count(a1, port), 1, 'the restarted worker starts the pod afresh');
  });

  await t.test('a worker whose Lease another holder took neither cordons the node nor evicts its pods when it stops', async () => {
    // Another holder takes the Lease (what a worker of another data dir does once this one's Lease expired).
    const lease = await c.admin.json<V1Lease>('GET', LEASE);
    await c.admin.json('PUT', LEASE, { body: { ...lease, spec: { ...lease.spec, holderIdentity: 'other-holder', renewTime: new Date().toISOString().replace('Z', '000Z') } } });
    await c.until('n1 to see that it lost its Lease', () => w1.stderr().includes('another worker took the node\'s Lease'), 30_000);
    w1.proc.kill('SIGTERM');
    assert.equal(await c.until('n1 to exit', () => (w1.proc.exitCode === null ? undefined : w1.proc.exitCode), 40_000), 0, w1.stderr().slice(-2000));
    assert.match(w1.stdout(), /drained: 0 evicted, 1 left behind/);
    assert.match(w1.stderr(), /does not hold the node's Lease: not cordoning the node nor evicting its pods/);
    const node = await c.admin.json<V1Node>('GET', '/api/v1/nodes/n1');
    assert.notEqual(node.spec?.unschedulable, true, 'not cordoned');
    assert.equal(node.metadata?.annotations?.['kube32.io/left'], undefined);
    assert.equal(node.status?.conditions?.find((x) => x.type === 'Ready')?.status, 'True', 'no Ready False posted for the other holder\'s node');
    assert.equal((await c.admin.json<V1Lease>('GET', LEASE)).spec?.holderIdentity, 'other-holder');
    const r = await c.kubectl(['get', 'pod', 'held', '-o', 'jsonpath={.metadata.uid}']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, running.metadata?.uid, 'the pod was not evicted');
  });

  await t.test('once the other holder\'s Lease has expired, a worker of another data dir takes the node over', async () => {
    // The other holder is gone: its Lease was last renewed more than leaseDurationSeconds (40 s) ago.
    const lease = await c.admin.json<V1Lease>('GET', LEASE);
    const old = new Date(Date.now() - 41_000).toISOString().replace('Z', '000Z');
    await c.admin.json('PUT', LEASE, { body: { ...lease, spec: { ...lease.spec, renewTime: old } } });
    const w2 = await c.startWorker('n1', a2, mops, { dataDir: join(c.tmp, 'successor') });
    const taken = await c.admin.json<V1Lease>('GET', LEASE);
    assert.equal(taken.spec?.holderIdentity, holderOf(w2));
    assert.notEqual(holderOf(w2), holder);
    assert.equal(taken.spec?.leaseTransitions, (lease.spec?.leaseTransitions ?? 0) + 1);
    await c.until('held Running on the successor', async () => {
      const p = await c.getPod('held');
      return p?.status?.phase === 'Running' && p.status.podIP === a2 ? p : undefined;
    }, 30_000);
    assert.equal(await count(a2, port), 1);
  });
});
