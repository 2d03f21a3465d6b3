/**
 * FeOS nodes in the cluster, end to end (issue 16, docs/feos/fleet.md), as root: a real `kube32-cli
 * control-plane --feos-listen` on the host and two real feosd, each in a network namespace of its own
 * with a veth pair to the host, joined with tokens of `kube32-cli feos token create`. What a user
 * checks: kubectl (nodes, events, delete node), feosctl through the cluster (`--kubeconfig --node`),
 * and the node's directory. No microVM: the pods are records whose guest is not installed (FAILED).
 * The control plane meshes its nodes: each feosd makes its mesh device with wireguard-go (a name of the suite's
 * own: wireguard-go's UAPI sockets share /var/run/wireguard whatever the namespace), which the namespaces' end
 * takes with them: no wireguard-go of the suite is left.
 */
import assert from 'node:assert/strict';
import { randomBytes, X509Certificate } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { tempDir } from '../../feos/harness.ts';
import { alive, processesInNetns } from '../../helpers/processes.ts';
import { CLI, createToken, FEOSCTL, type FleetNode, feosctlNode, freePort, keepLog, kubectl, Nets, readyOf, run, spawnFeosctlNode, startControlPlane, startNode, until  } from './helpers.ts';

const CP_NAME = 'feos-cp.test';
const GRACE_S = 15;

test('two feosd in network namespaces join the control plane: Ready nodes, events, feosctl --node, a kill, a removal, a stop', { timeout: 900_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  const nets = new Nets();
  const { dir, cleanup } = tempDir('k32t-fleet-');
  const nodes: FleetNode[] = [];
  t.after(async () => {
    for (const n of nodes) keepLog(`e2e-${n.name}`, n.proc.stderr());
    for (const n of nodes) await n.proc.stop('SIGKILL');
    await nets.removeAll();
    cleanup();
  });
  const netA = await nets.add('a');
  const netB = await nets.add('b');
  const tag = randomBytes(3).toString('hex');
  const meshDevice = (n: string) => ['--mesh-device', `wg${tag}${n}`];
  const port = await freePort();
  const cpArgs = [
    '--feos-listen',
    `0.0.0.0:${port}`,
    '--feos-advertise-address',
    `${netA.host}:${port}`,
    '--feos-server-name',
    CP_NAME,
    '--node-monitor-grace-period',
    `${GRACE_S}s`,
  ];
  let cp = await startControlPlane(t, cpArgs);
  const first = cp;
  t.after(() => keepLog('e2e-control-plane', first.logs()));
  const k = (...args: string[]) => kubectl(cp.kubeconfig, ...args);
  const token = await createToken(cp.kubeconfig, '--ttl', '1h', '--description', 'the e2e nodes');
  assert.match(token, /^feos-join-[a-z0-9]{6}-[a-z0-9]{16}\.[0-9a-f]{64}$/);

  // --- two nodes join, each through the host side of its own veth
  const a = await startNode(join(dir, 'a'), 'fleet-a', netA, port, CP_NAME, token, meshDevice('a'));
  nodes.push(a);
  const b = await startNode(join(dir, 'b'), 'fleet-b', netB, port, CP_NAME, token, meshDevice('b'));
  nodes.push(b);
  const table = await until(
    'kubectl get nodes lists both Ready with the runtime feos',
    async () => {
      const r = await k('get', 'nodes', '-L', 'kube32.io/runtime');
      return /^fleet-a\s+Ready\s.*\sfeos\s*$/m.test(r.stdout) && /^fleet-b\s+Ready\s.*\sfeos\s*$/m.test(r.stdout) ? r.stdout : undefined;
    },
    90_000,
  );
  assert.match(table, /^NAME\s+STATUS\s+ROLES\s+AGE\s+VERSION\s+RUNTIME$/m);
  for (const n of [a, b]) {
    const node = JSON.parse((await k('get', 'node', n.name, '-o', 'json')).stdout) as {
      spec: { taints?: { key: string; effect: string }[] };
      status: { capacity: Record<string, string>; allocatable: Record<string, string>; addresses: { type: string; address: string }[]; nodeInfo: Record<string, string> };
    };
    assert.deepEqual(node.status.capacity, { cpu: String(cpus().length), memory: String(totalmem()), pods: '110' }, `${n.name}: capacity from its reports`);
    assert.equal(node.status.allocatable.pods, '110');
    assert.ok(node.status.addresses.some((x) => x.type === 'InternalIP' && x.address === n.net.node), `${n.name}: its veth address: ${JSON.stringify(node.status.addresses)}`);
    assert.match(node.status.nodeInfo.kubeletVersion ?? '', /^feosd\//);
    assert.ok(node.spec.taints?.some((x) => x.key === 'kube32.io/runtime' && x.effect === 'NoSchedule'));
    const rec = JSON.parse(readFileSync(join(n.nodeDir, 'node.json'), 'utf8')) as { name: string; spiffeId: string; instances: { address: string }[] };
    assert.equal(rec.name, n.name);
    assert.equal(rec.spiffeId, `spiffe://feos.local/node/${n.name}`);
    assert.deepEqual(rec.instances.map((i) => i.address), [`${netA.host}:${port}`], 'the instance list of the join');
  }

  // --- their Started events on the Nodes
  await until(
    'kubectl get events shows both Started events',
    async () => {
      const r = await k('get', 'events');
      return /Started\s+node\/fleet-a\s+feosd .* started/.test(r.stdout) && /Started\s+node\/fleet-b\s+feosd .* started/.test(r.stdout) ? r.stdout : undefined;
    },
    30_000,
  );

  // --- feosctl --node: each node's own pods, through the control plane's node connection
  const created = await feosctlNode(cp.kubeconfig, 'fleet-a', 'pod', 'create', '--id', 'vmaaaaaaaa1');
  assert.equal(created.code, 0, created.stderr);
  const onA = await until(
    'feosctl --node fleet-a pod list shows its pod FAILED (no guest installed)',
    async () => {
      const r = await feosctlNode(cp.kubeconfig, 'fleet-a', 'pod', 'list');
      return /^vmaaaaaaaa1\s+FAILED\s/m.test(r.stdout) ? r.stdout : undefined;
    },
    30_000,
  );
  assert.match(onA, /^ID\s+STATE/);
  const onB = await feosctlNode(cp.kubeconfig, 'fleet-b', 'pod', 'list', '-o', 'json');
  assert.equal(onB.code, 0, onB.stderr);
  assert.deepEqual((JSON.parse(onB.stdout) as { pods: unknown[] }).pods, [], "fleet-b's list is its own");
  // The pod's events come to the Node too.
  await until(
    "the pod's event on fleet-a",
    async () => {
      const r = await k('get', 'events', '--field-selector', 'involvedObject.name=fleet-a');
      return /PodFailed\s+node\/fleet-a\s+pod vmaaaaaaaa1: FAILED/.test(r.stdout) ? r.stdout : undefined;
    },
    30_000,
  );

  // --- SIGKILL: Unknown within the grace, Ready again when it starts, with the same identity
  const identity = (n: FleetNode) => ({
    nodeJson: readFileSync(join(n.nodeDir, 'node.json'), 'utf8'),
    key: readFileSync(join(n.nodeDir, 'key.pem'), 'utf8'),
    serial: new X509Certificate(readFileSync(join(n.nodeDir, 'chain.pem'), 'utf8')).serialNumber,
  });
  const serials = async (name: string) => (await k('get', 'node', name, '-o', 'jsonpath={.metadata.annotations.feos\\.kube32\\.io/certificate-serials}')).stdout;
  const before = identity(a);
  const serialsBefore = await serials('fleet-a');
  await a.proc.stop('SIGKILL');
  const killedAt = Date.now();
  await until('fleet-a goes Unknown', async () => (await readyOf(cp.kubeconfig, 'fleet-a')) === 'Unknown', (GRACE_S + 30) * 1000);
  const took = Date.now() - killedAt;
  assert.ok(took < (GRACE_S + 20) * 1000, `Unknown ${took} ms after the kill: the grace (${GRACE_S} s) and the controller's period`);
  assert.equal(await readyOf(cp.kubeconfig, 'fleet-b'), 'True', 'the other node stays Ready');
  const unknownTaints = JSON.parse((await k('get', 'node', 'fleet-a', '-o', 'jsonpath={.spec.taints}')).stdout || '[]') as { key: string }[];
  assert.ok(unknownTaints.some((x) => x.key === 'node.kubernetes.io/unreachable'), `the unreachable taint while Unknown: ${JSON.stringify(unknownTaints)}`);
  await a.restart();
  await until('fleet-a Ready again', async () => (await readyOf(cp.kubeconfig, 'fleet-a')) === 'True', 60_000);
  await until(
    'the unreachable taint goes with Ready, the runtime taint stays',
    async () => {
      const taints = JSON.parse((await k('get', 'node', 'fleet-a', '-o', 'jsonpath={.spec.taints}')).stdout || '[]') as { key: string }[];
      return !taints.some((x) => x.key.startsWith('node.kubernetes.io/')) && taints.some((x) => x.key === 'kube32.io/runtime');
    },
    30_000,
  );
  const described = await k('describe', 'node', 'fleet-a');
  assert.equal(described.code, 0, described.stderr);
  assert.match(described.stdout, /Taints:\s+kube32\.io\/runtime=feos:NoSchedule/);
  assert.deepEqual(identity(a), before, 'the same identity: node.json, key and certificate unchanged');
  assert.equal(await serials('fleet-a'), serialsBefore, 'no new join: the Node allows the same certificate');
  assert.ok(!readdirSync(a.nodeDir).some((f) => f.startsWith('removed-')));
  assert.doesNotMatch(a.proc.stderr(), /joined the control plane/);

  // --- an expired token is refused: nothing is issued, no Node
  // A token lives a minute at least (token create refuses less): its Secret's expiration is set in the past,
  // as time would.
  const expiring = await createToken(cp.kubeconfig, '--ttl', '1m', '--description', 'expired by hand');
  const expiringId = /^feos-join-([a-z0-9]{6})-/.exec(expiring)![1]!;
  const past = new Date(Date.now() - 60_000).toISOString().replace(/\.\d+Z$/, 'Z');
  const patched = await k('patch', 'secret', '-n', 'kube-system', `bootstrap-token-${expiringId}`, '--type', 'merge', '-p', JSON.stringify({ stringData: { expiration: past } }));
  assert.equal(patched.code, 0, patched.stderr);
  const listed = JSON.parse((await run(process.execPath, [CLI, 'feos', 'token', 'list', '-o', 'json', '--kubeconfig', cp.kubeconfig])).stdout) as { items: { id: string; expiration: string }[] };
  assert.equal(listed.items.find((i) => i.id === expiringId)!.expiration, past);
  const c = await startNode(join(dir, 'c'), 'fleet-c', netB, port, CP_NAME, expiring, meshDevice('c'));
  nodes.push(c);
  await until('feosd says the token was refused', async () => c.proc.stderr().includes('the join token was refused'), 60_000);
  assert.ok(!existsSync(join(c.nodeDir, 'node.json')), 'nothing issued');
  assert.notEqual((await k('get', 'node', 'fleet-c')).code, 0, 'no Node for a refused join');
  assert.equal(await readyOf(cp.kubeconfig, 'fleet-a'), 'True', 'feosd on the same path, unaffected');
  await c.proc.stop('SIGKILL');

  // --- kubectl delete node: the identity moves to removed-…, a new token joins it again
  const bBefore = identity(b);
  const deleted = await k('delete', 'node', 'fleet-b');
  assert.equal(deleted.code, 0, deleted.stderr);
  const removed = await until('removed-<time>/ with the old identity', async () => readdirSync(b.nodeDir).find((f) => f.startsWith('removed-') && existsSync(join(b.nodeDir, f, 'node.json'))), 30_000);
  assert.match(removed, /^removed-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}Z$/);
  assert.equal(readFileSync(join(b.nodeDir, removed, 'key.pem'), 'utf8'), bBefore.key);
  assert.notEqual((await k('get', 'node', 'fleet-b')).code, 0, 'the node stays deleted: a report does not make it again');
  writeFileSync(b.tokenFile, `${await createToken(cp.kubeconfig, '--ttl', '1h')}\n`);
  await until('fleet-b Ready again after a new join', async () => (await readyOf(cp.kubeconfig, 'fleet-b')) === 'True', 60_000);
  const bAfter = identity(b);
  assert.notEqual(bAfter.key, bBefore.key, 'a new key');
  assert.notEqual(bAfter.serial, bBefore.serial, 'a new certificate');

  // --- the control plane restarted: feosd's own API serves on meanwhile; the nodes come back on their own
  await cp.stop();
  const own = await run(process.execPath, [FEOSCTL, '--socket', a.proc.socket, 'pod', 'list']);
  assert.equal(own.code, 0, own.stderr);
  assert.match(own.stdout, /^vmaaaaaaaa1\s+FAILED\s/m, "feosd's own API, with the control plane gone");
  cp = await startControlPlane(t, cpArgs, cp.dataDir);
  const again = cp;
  t.after(() => keepLog('e2e-control-plane-again', again.logs()));
  for (const n of [a, b]) {
    await until(`feosctl --node ${n.name} through the restarted control plane`, async () => (await feosctlNode(cp.kubeconfig, n.name, 'pod', 'list')).code === 0, 60_000);
    const renewTime = async () => (await k('-n', 'kube-node-lease', 'get', 'lease', n.name, '-o', 'jsonpath={.spec.renewTime}')).stdout;
    const was = await renewTime();
    await until(`${n.name} reports to the restarted control plane`, async () => (await renewTime()) !== was, 30_000);
    assert.equal(await readyOf(cp.kubeconfig, n.name), 'True');
  }
  assert.ok(!readdirSync(a.nodeDir).some((f) => f.startsWith('removed-')), 'a restart is no removal');

  // --- SIGTERM ends a stream in flight through the cluster with UNAVAILABLE "the node stops"
  const watch = spawnFeosctlNode(cp.kubeconfig, 'fleet-a', 'pod', 'events');
  t.after(() => watch.kill());
  await until('the watch through the cluster is in flight (the initial event)', async () => /^vmaaaaaaaa1\s+FAILED \(now\)/m.test(watch.out()), 30_000);
  await a.proc.stop('SIGTERM');
  const exitCode = await Promise.race([watch.done, new Promise<string>((r) => setTimeout(() => r('still running'), 30_000).unref())]);
  assert.equal(exitCode, 1, `feosctl ends with an error: ${watch.err()}`);
  assert.match(watch.err(), /^feosctl: UNAVAILABLE: the node stops: the call did not end within 1 s of feosd's stop/, watch.err());
  assert.equal(a.proc.child.exitCode, 0, a.proc.stderr().split('\n').slice(-10).join('\n'));
  await until('a stopped node is not Ready (FeosdStopping)', async () => (await readyOf(cp.kubeconfig, 'fleet-a')) !== 'True', 30_000);
  await until(
    'its Stopping event',
    async () => /Stopping\s+node\/fleet-a/.test((await k('get', 'events', '--field-selector', 'involvedObject.name=fleet-a')).stdout),
    30_000,
  );

  // --- the end: the namespaces go with every process in them, the mesh's wireguard-go among them
  for (const n of nodes) await n.proc.stop('SIGKILL');
  const wireguard = [...(await processesInNetns(netA.ns)), ...(await processesInNetns(netB.ns))].filter((p) => p.name === 'wireguard-go');
  assert.equal(wireguard.length, 2, `each node's mesh device is a wireguard-go of its own: ${JSON.stringify(wireguard)}`);
  await nets.removeAll();
  assert.deepEqual(wireguard.filter((p) => alive(p.pid)), [], 'no wireguard-go of the suite is left');
});
