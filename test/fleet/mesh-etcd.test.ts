/**
 * The mesh with two control planes on one etcd (issue 21; docs/feos/fleet.md, "The mesh"): nodes that
 * call JoinMesh through both at once get one /64 and /96s of their own (the record's compare-and-swap),
 * a node connected to one instance is sent the peers that joined through the other, and a node deleted
 * through one leaves the peers sent by the other.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { kubectl, startControlPlane, CLI } from '../apiserver-etcd/control-plane.ts';
import { startEtcd } from '../apiserver-etcd/etcd-server.ts';
import { waitFor } from '../helpers/wait.ts';
import { MeshStandIn } from './mesh-stand-in.ts';
import { dialNodeConnection, join as joinNode, makeCsr, makeKey, nodeService } from './stand-in.ts';

test('two control planes on one etcd agree on the mesh: one /64, distinct /96s, peers from either', { timeout: 300_000 }, async (t) => {
  const { url } = await startEtcd(t);
  const args = { extraArgs: ['--feos-listen', '127.0.0.1:0'] };
  const cp1 = await startControlPlane(t, url, 'cp1', args);
  const cp2 = await startControlPlane(t, url, 'cp2', args);
  const kc = new KubeConfig();
  kc.loadFromFile(cp1.kubeconfig);
  const caPem = Buffer.from(kc.getCurrentCluster()!.caData!, 'base64').toString('utf8');
  const token = execFileSync(process.execPath, [CLI, 'feos', 'token', 'create', '--kubeconfig', cp1.kubeconfig], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
  const tokenSecret = /^feos-join-([a-z0-9]{6}-[a-z0-9]{16})\./.exec(token)![1]!;

  // Eight nodes, JoinMesh through cp1 and cp2 alternately, all at once.
  const nodes = await Promise.all(
    Array.from({ length: 8 }, async (_, i) => {
      const name = `etcd-mesh-${i}`;
      const key = await makeKey();
      const via = i % 2 === 0 ? cp1.feos! : cp2.feos!;
      const joined = await joinNode(via, caPem, tokenSecret, name, await makeCsr(key));
      const ns = nodeService(via, caPem, key, joined.chainPem);
      t.after(() => ns.close());
      return { name, key, chainPem: joined.chainPem, ns, wgKey: randomBytes(32).toString('base64'), endpoint: `127.0.0.1:${51820 + i}` };
    }),
  );
  const answers = await Promise.all(nodes.map((n) => n.ns.joinMesh({ publicKey: n.wgKey, endpoint: n.endpoint })));
  assert.equal(new Set(answers.map((x) => x.clusterPrefix)).size, 1, `one /64: ${JSON.stringify(answers)}`);
  assert.equal(new Set(answers.map((x) => x.nodePrefix)).size, 8, `eight distinct /96s: ${JSON.stringify(answers.map((x) => x.nodePrefix))}`);

  // Node 1 joined through cp2; its node connection with cp2 gets every other node, those of cp1 too.
  const first = nodes[1]!;
  const mesh = new MeshStandIn();
  mesh.joined(answers[1]!.clusterPrefix, answers[1]!.nodePrefix, first.wgKey, first.endpoint);
  const [host, port] = [cp2.feos!.slice(0, cp2.feos!.lastIndexOf(':')), Number(cp2.feos!.slice(cp2.feos!.lastIndexOf(':') + 1))];
  const conn = await dialNodeConnection(host, port, caPem, first.key, first.chainPem, 'pod0000000a', (s) => mesh.serve(s));
  t.after(() => conn.close());
  const want = Object.fromEntries(nodes.map((n, i) => [n.name, { endpoint: n.endpoint, prefix: answers[i]!.nodePrefix, publicKey: n.wgKey }]).filter(([n]) => n !== first.name));
  await waitFor('node 1 has the seven others as its peers', 30_000, () => Object.keys(mesh.peers()).length === 7);
  assert.deepEqual(mesh.peers(), want);

  // Node 0 (cp1's) changes its endpoint through cp1; node 2 is deleted through cp1: both reach node 1 through cp2.
  await nodes[0]!.ns.joinMesh({ publicKey: nodes[0]!.wgKey, endpoint: '127.0.0.1:52000' });
  await waitFor("node 1 has node 0's new endpoint", 30_000, () => mesh.peers()['etcd-mesh-0']?.endpoint === '127.0.0.1:52000');
  const del = await kubectl(cp1.kubeconfig, ['delete', 'node', 'etcd-mesh-2']);
  assert.equal(del.code, 0, del.stderr);
  await waitFor('node 2 leaves the peers of node 1', 30_000, () => !('etcd-mesh-2' in mesh.peers()) && Object.keys(mesh.peers()).length === 6);
});
