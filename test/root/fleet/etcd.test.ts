/**
 * FeOS nodes with two control planes on one etcd, end to end (issue 16, "several API servers"), as
 * root: two real `kube32-cli control-plane --storage etcd --feos-listen` on the host and two real
 * feosd in network namespaces of their own (veth pairs to the host), joined through one instance.
 * Each node learns both instances from the join's answer and holds a node connection to each: feosctl
 * through either API server (`--kubeconfig --node`) reaches either node, since an API server's tunnel
 * goes only onto a node connection with its own process.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fromBinary } from '@bufbuild/protobuf';
import { MicroVmSchema } from '../../../src/feos/gen/feos/microvm/v1/microvm_pb.js';
import { startControlPlane } from '../../apiserver-etcd/control-plane.ts';
import { startEtcd } from '../../apiserver-etcd/etcd-server.ts';
import { tempDir } from '../../feos/harness.ts';
import { createToken, type FleetNode, feosctlNode, freePort, keepLog, kubectl, Nets, ROOT, readyOf, startNode, until  } from './helpers.ts';

const CP_NAME = 'feos-cp.test';
const GUEST_DIR = join(ROOT, 'build/guest');
const POD = 'vmbtaaaaaa1';

test('two control planes on one etcd: each feosd holds a node connection to each, feosctl --node works through both, a pod boots, the certificates renew', { timeout: 600_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  const nets = new Nets();
  const { dir, cleanup } = tempDir('k32t-fleet-etcd-');
  const nodes: FleetNode[] = [];
  t.after(async () => {
    for (const n of nodes) keepLog(`etcd-${n.name}`, n.proc.stderr());
    for (const n of nodes) await n.proc.stop('SIGKILL');
    await nets.removeAll();
    cleanup();
  });
  const netA = await nets.add('a');
  const netB = await nets.add('b');
  const { url } = await startEtcd(t);
  const feosArgs = (port: number) => ['--feos-listen', `0.0.0.0:${port}`, '--feos-advertise-address', `${netA.host}:${port}`, '--feos-server-name', CP_NAME, '--feos-node-cert-ttl', '2m'];
  const p1 = await freePort();
  const cp1 = await startControlPlane(t, url, 'cp1', { extraArgs: feosArgs(p1) });
  const p2 = await freePort();
  const cp2 = await startControlPlane(t, url, 'cp2', { extraArgs: feosArgs(p2) });
  t.after(() => {
    keepLog('etcd-cp1', cp1.logs());
    keepLog('etcd-cp2', cp2.logs());
  });
  const instances = new Set([`${netA.host}:${p1}`, `${netA.host}:${p2}`]);

  // A token made through cp1; the nodes join through cp2's port.
  const token = await createToken(cp1.kubeconfig);
  execFileSync('bash', [join(ROOT, 'scripts/build-guest.sh'), GUEST_DIR], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 300_000 });
  const a = await startNode(join(dir, 'a'), 'fleet-a', netA, p2, CP_NAME, token, [], GUEST_DIR);
  nodes.push(a);
  const b = await startNode(join(dir, 'b'), 'fleet-b', netB, p2, CP_NAME, token);
  nodes.push(b);
  for (const n of [a, b]) {
    await until(`${n.name} Ready through cp1`, async () => (await readyOf(cp1.kubeconfig, n.name)) === 'True', 90_000);
    const rec = JSON.parse(readFileSync(join(n.nodeDir, 'node.json'), 'utf8')) as { instances: { address: string }[] };
    assert.deepEqual(new Set(rec.instances.map((i) => i.address)), instances, `${n.name}: both instances listed`);
  }
  const serialOf = (n: FleetNode) => new X509Certificate(readFileSync(join(n.nodeDir, 'chain.pem'), 'utf8')).serialNumber;
  const joinedSerial = new Map([a, b].map((n) => [n.name, serialOf(n)]));
  const joinedKey = new Map([a, b].map((n) => [n.name, readFileSync(join(n.nodeDir, 'key.pem'), 'utf8')]));
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

  // A pod boots on fleet-a (QEMU under TCG), made through cp2; its events are Events on the Node, seen through cp1.
  t.after(async () => {
    await feosctlNode(cp2.kubeconfig, 'fleet-a', 'pod', 'delete', POD);
    try {
      const vm = fromBinary(MicroVmSchema, readFileSync(join(a.proc.stateDir, 'vms', POD, 'microvm.pb')));
      if (vm.pid > 0) process.kill(vm.pid, 'SIGKILL');
    } catch {}
  });
  const created = await feosctlNode(cp2.kubeconfig, 'fleet-a', 'pod', 'create', '--id', POD);
  assert.equal(created.code, 0, created.stderr);
  const podEvents = async () => (await kubectl(cp1.kubeconfig, 'get', 'events', '--field-selector', 'involvedObject.name=fleet-a')).stdout;
  const settled = await until(
    'the PodRunning (or PodFailed) event on the Node',
    async () => {
      const out = await podEvents();
      return new RegExp(`Pod(Running|Failed)\\s+node/fleet-a\\s+pod ${POD}`).test(out) ? out : undefined;
    },
    400_000,
  );
  assert.match(settled, new RegExp(`Normal\\s+PodRunning\\s+node/fleet-a\\s+pod ${POD}: RUNNING`), settled);
  const deleted = await feosctlNode(cp1.kubeconfig, 'fleet-a', 'pod', 'delete', POD);
  assert.equal(deleted.code, 0, deleted.stderr);
  await until('the PodDeleted event on the Node', async () => new RegExp(`PodDeleted\\s+node/fleet-a\\s+pod ${POD}`).test(await podEvents()), 60_000);

  // A renewal of the 2-minute certificates (at two thirds): new certificates, the same keys, the nodes
  // Ready and reached through both API servers on the new node connections.
  for (const n of [a, b]) {
    const renewed = await until(`${n.name} renews its certificate`, async () => (serialOf(n) !== joinedSerial.get(n.name) ? serialOf(n) : undefined), 150_000);
    await until(
      `the Node allows ${n.name}'s new certificate first`,
      async () => (await kubectl(cp1.kubeconfig, 'get', 'node', n.name, '-o', 'jsonpath={.metadata.annotations.feos\\.kube32\\.io/certificate-serials}')).stdout.startsWith(renewed.toLowerCase().replace(/^0+/, '')),
      30_000,
    );
    assert.equal(readFileSync(join(n.nodeDir, 'key.pem'), 'utf8'), joinedKey.get(n.name), 'the key stays');
    assert.equal(await readyOf(cp2.kubeconfig, n.name), 'True');
  }
  for (const cp of [cp1, cp2]) {
    for (const n of [a, b]) {
      await until(`feosctl --node ${n.name} after the renewal`, async () => (await feosctlNode(cp.kubeconfig, n.name, 'pod', 'list', '-o', 'json')).code === 0, 60_000);
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
