/**
 * FeOS nodes with two control planes on one etcd, end to end (issue 16, "several API servers"), as
 * root: two real `kube32-cli control-plane --storage etcd --feos-listen` on the host and two real
 * feosd in network namespaces of their own (veth pairs to the host), joined through one instance.
 * Each node learns both instances from the join's answer and holds a node connection to each: feosctl
 * through either API server (`--kubeconfig --node`) reaches either node, since an API server's tunnel
 * goes only onto a node connection with its own process.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { startControlPlane } from '../../apiserver-etcd/control-plane.ts';
import { startEtcd } from '../../apiserver-etcd/etcd-server.ts';
import { tempDir } from '../../feos/harness.ts';
import { createToken, type FleetNode, feosctlNode, freePort, kubectl, Nets, readyOf, startNode, until } from './helpers.ts';

const CP_NAME = 'feos-cp.test';

test('two control planes on one etcd: each feosd holds a node connection to each, feosctl --node works through both', { timeout: 600_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  const nets = new Nets();
  const { dir, cleanup } = tempDir('k32t-fleet-etcd-');
  const nodes: FleetNode[] = [];
  t.after(async () => {
    for (const n of nodes) await n.proc.stop('SIGKILL');
    await nets.removeAll();
    cleanup();
  });
  const netA = await nets.add('a');
  const netB = await nets.add('b');
  const { url } = await startEtcd(t);
  const feosArgs = (port: number) => ['--feos-listen', `0.0.0.0:${port}`, '--feos-advertise-address', `${netA.host}:${port}`, '--feos-server-name', CP_NAME];
  const p1 = await freePort();
  const cp1 = await startControlPlane(t, url, 'cp1', { extraArgs: feosArgs(p1) });
  const p2 = await freePort();
  const cp2 = await startControlPlane(t, url, 'cp2', { extraArgs: feosArgs(p2) });
  const instances = new Set([`${netA.host}:${p1}`, `${netA.host}:${p2}`]);

  // A token made through cp1; the nodes join through cp2's port.
  const token = await createToken(cp1.kubeconfig);
  const a = await startNode(join(dir, 'a'), 'fleet-a', netA, p2, CP_NAME, token);
  nodes.push(a);
  const b = await startNode(join(dir, 'b'), 'fleet-b', netB, p2, CP_NAME, token);
  nodes.push(b);
  for (const n of [a, b]) {
    await until(`${n.name} Ready through cp1`, async () => (await readyOf(cp1.kubeconfig, n.name)) === 'True', 90_000);
    const rec = JSON.parse(readFileSync(join(n.nodeDir, 'node.json'), 'utf8')) as { instances: { address: string }[] };
    assert.deepEqual(new Set(rec.instances.map((i) => i.address)), instances, `${n.name}: both instances listed`);
  }
  const table = await kubectl(cp2.kubeconfig, 'get', 'nodes', '-L', 'kube32.io/runtime');
  assert.match(table.stdout, /^fleet-a\s+Ready\s.*\sfeos\s*$/m);
  assert.match(table.stdout, /^fleet-b\s+Ready\s.*\sfeos\s*$/m);

  // Every API server reaches every node over its own node connection.
  for (const cp of [cp1, cp2]) {
    for (const n of [a, b]) {
      const r = await until(
        `feosctl --node ${n.name} through ${cp === cp1 ? 'cp1' : 'cp2'}`,
        async () => {
          const x = await feosctlNode(cp.kubeconfig, n.name, 'pod', 'list', '-o', 'json');
          return x.code === 0 ? x : undefined;
        },
        60_000,
      );
      assert.deepEqual((JSON.parse(r.stdout) as { pods: unknown[] }).pods, []);
    }
  }

  // cp1 stops: the nodes stay Ready through cp2, which still reaches them.
  cp1.proc.kill('SIGTERM');
  await cp1.exited;
  for (const n of [a, b]) {
    const r = await feosctlNode(cp2.kubeconfig, n.name, 'pod', 'list', '-o', 'json');
    assert.equal(r.code, 0, r.stderr);
    // Reports go on to cp2: the Lease is renewed after cp1 stopped.
    const renewTime = async () => (await kubectl(cp2.kubeconfig, '-n', 'kube-node-lease', 'get', 'lease', n.name, '-o', 'jsonpath={.spec.renewTime}')).stdout;
    const first = await renewTime();
    await until(`${n.name}'s Lease renewed through cp2`, async () => (await renewTime()) !== first, 30_000);
    assert.equal(await readyOf(cp2.kubeconfig, n.name), 'True');
  }
});
