/**
 * Two `kube32-cli control-plane --storage etcd --leader-elect` processes on one etcd (issue 11):
 * both serve the cluster, one holds the Lease kube-system/kube32-controllers and runs the
 * controllers; when it is killed (SIGKILL, no release) the other takes the Lease within the lease
 * duration and its scheduler binds the next pod.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { eventually, kubectl, startControlPlane } from './control-plane.ts';
import { startEtcd } from './etcd-server.ts';

test('two control planes on one etcd: one leads; killed, the other takes over and schedules', { timeout: 240_000 }, async (t) => {
  const { url } = await startEtcd(t);
  const cps = { cp1: await startControlPlane(t, url, 'cp1'), cp2: await startControlPlane(t, url, 'cp2') };
  const holder = (kc: string) => async () => (await kubectl(kc, ['get', 'lease', 'kube32-controllers', '-n', 'kube-system', '-o', 'jsonpath={.spec.holderIdentity}'])).stdout;
  const first = (await eventually('a leader', 30_000, holder(cps.cp2.kubeconfig), (h) => h === 'cp1' || h === 'cp2')) as 'cp1' | 'cp2';
  const standby = first === 'cp1' ? 'cp2' : 'cp1';

  // A Ready node (no kubelet) and a pod, written through the standby's API server: the leader's scheduler binds it.
  const kc = cps[standby].kubeconfig;
  assert.equal((await kubectl(kc, ['create', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' } }))).code, 0);
  const status = { status: { allocatable: { memory: '1Mi', pods: '10' }, capacity: { memory: '1Mi', pods: '10' }, conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'test' }] } };
  const patched = await kubectl(kc, ['patch', 'node', 'n1', '--subresource=status', '--type=merge', '-p', JSON.stringify(status)]);
  assert.equal(patched.code, 0, patched.stderr);
  const pod = (name: string) => JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'default' }, spec: { containers: [{ name: 'c', image: `kube32.io/wasm-sha256:${'0'.repeat(64)}` }] } });
  const nodeOf = (name: string) => async () => (await kubectl(kc, ['get', 'pod', name, '-o', 'jsonpath={.spec.nodeName}'])).stdout;
  assert.equal((await kubectl(kc, ['create', '-f', '-'], pod('p1'))).code, 0);
  await eventually('p1 bound by the leader', 30_000, nodeOf('p1'), (n) => n === 'n1');

  // The leader dies without releasing: the standby takes the Lease once it has not changed for 15 s.
  const killedAt = Date.now();
  cps[first].proc.kill('SIGKILL');
  await cps[first].exited;
  await eventually('the standby leads', 40_000, holder(kc), (h) => h === standby);
  const seenMs = Date.now() - killedAt;
  // When the standby took it, by the Lease's own acquireTime (its clock, this machine's): the time
  // kubectl then took to see it is no part of the takeover (a loaded machine adds seconds there).
  const acquired = (await kubectl(kc, ['get', 'lease', 'kube32-controllers', '-n', 'kube-system', '-o', 'jsonpath={.spec.acquireTime}'])).stdout;
  const tookMs = Date.parse(acquired) - killedAt;
  // The standby saw the last renewal at most a retry period (2 s) after the kill; the Lease is free
  // 15 s later, taken at the next try (2 s at most); 5 s more for timers and calls late on a loaded machine.
  assert.ok(tookMs < 15_000 + 2 * 2_000 + 5_000, `took over ${tookMs} ms after the kill (acquireTime ${acquired})`);
  t.diagnostic(`the standby took the Lease ${tookMs} ms after the kill; kubectl saw it ${seenMs} ms after`);
  assert.equal((await kubectl(kc, ['create', '-f', '-'], pod('p2'))).code, 0);
  await eventually('p2 bound by the new leader', 30_000, nodeOf('p2'), (n) => n === 'n1');
});
