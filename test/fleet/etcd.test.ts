/**
 * FeOS nodes with two control planes on one etcd (issue 16, "several API servers"): each instance
 * lists itself in the instance list that the join's and every report's answer carry, and a node
 * removed through one (`kubectl delete node`) is refused by the other on its next call.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { eventually, kubectl, startControlPlane, CLI } from '../apiserver-etcd/control-plane.ts';
import { startEtcd } from '../apiserver-etcd/etcd-server.ts';
import { join as joinNode, makeCsr, makeKey, nodeService, report } from './stand-in.ts';

test('two control planes on one etcd: both listed to the node; a node deleted through one is refused by the other', { timeout: 240_000 }, async (t) => {
  const { url } = await startEtcd(t);
  const args = { extraArgs: ['--feos-listen', '127.0.0.1:0'] };
  const cp1 = await startControlPlane(t, url, 'cp1', args);
  const cp2 = await startControlPlane(t, url, 'cp2', args);
  assert.ok(cp1.feos && cp2.feos);
  const kc = new KubeConfig();
  kc.loadFromFile(cp1.kubeconfig);
  const caPem = Buffer.from(kc.getCurrentCluster()!.caData!, 'base64').toString('utf8');

  // A token made through cp1 joins through cp2.
  const token = execFileSync(process.execPath, [CLI, 'feos', 'token', 'create', '--kubeconfig', cp1.kubeconfig], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
  const tokenSecret = /^feos-join-([a-z0-9]{6}-[a-z0-9]{16})\./.exec(token)![1]!;
  const key = await makeKey();
  const name = 'feos-etcd-node';
  const joined = await joinNode(cp2.feos!, caPem, tokenSecret, name, await makeCsr(key));
  const both = new Set([cp1.feos, cp2.feos]);
  assert.deepEqual(new Set(joined.instances.map((i) => i.address)), both, 'the join answers both instances');
  assert.equal(joined.instances[0]!.address, cp2.feos, 'the answering instance first');

  // Reports through cp1 make the Node Ready; the answer lists both.
  const ns1 = nodeService(cp1.feos!, caPem, key, joined.chainPem);
  const ns2 = nodeService(cp2.feos!, caPem, key, joined.chainPem);
  t.after(() => {
    ns1.close();
    ns2.close();
  });
  const answer = await ns1.report(report('s-1', name));
  assert.deepEqual(new Set(answer.instances.map((i) => i.address)), both);
  await ns2.report(report('s-1', name));
  await eventually('the Node Ready through cp2', 30_000, async () => (await kubectl(cp2.kubeconfig, ['get', 'node', name, '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")].status}'])).stdout, (s) => s === 'True');

  // Deleted through cp1: cp2 refuses the next call.
  const del = await kubectl(cp1.kubeconfig, ['delete', 'node', name]);
  assert.equal(del.code, 0, del.stderr);
  await assert.rejects(ns2.report(report('s-1', name)), (err: unknown) => (err as { code?: number }).code === 7);
  await assert.rejects(ns1.sendEvents({ startId: 's-1', events: [] }), (err: unknown) => (err as { code?: number }).code === 7);
});
