/**
 * The mesh, the control plane's half (issue 21; docs/feos/fleet.md, "The mesh"): a real `kube32-cli
 * control-plane --feos-listen --feos-mesh-node-limit 2` process, stand-in nodes built from the protos
 * (./stand-in.ts; their MeshService: ./mesh-stand-in.ts) and kubectl for what a user checks. JoinMesh's
 * answers and refusals, the /64 and the /96s in the ConfigMap kube-system/feos-mesh, kept across a restart
 * of the control plane and freed when the Node is deleted, and the peers sent over the node connections:
 * whole at connect, deltas after, whole again after a FAILED_PRECONDITION.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { BlockList } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import test, { type TestContext } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { waitFor } from '../helpers/wait.ts';
import { MeshStandIn } from './mesh-stand-in.ts';
import { dialNodeConnection, join as joinNode, makeCsr, makeKey, type NodeConnection, type NodeKey, nodeService } from './stand-in.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const CLI = join(ROOT, 'bin/kube32-cli.js');

interface ControlPlane {
  kubeconfig: string;
  feos: string;
  caPem: string;
  proc: ChildProcess;
  exited: Promise<void>;
  logs(): string;
}

/** `kube32-cli control-plane` on `dataDir` (kept: a restart uses it again); stopped in `t.after`. */
async function startControlPlane(t: TestContext, dataDir: string, args: string[]): Promise<ControlPlane> {
  const proc = spawn(process.execPath, [CLI, 'control-plane', '--data-dir', dataDir, '--port', '0', '--feos-listen', '127.0.0.1:0', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'info' } });
  let stderr = '';
  proc.stderr!.setEncoding('utf8');
  proc.stderr!.on('data', (d: string) => {
    stderr = (stderr + d).slice(-20_000);
  });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    await exited;
  });
  const line = await Promise.race([
    new Promise<string>((resolve) => createInterface(proc.stdout!).once('line', resolve)),
    exited.then(() => {
      throw new Error(`the control plane exited:\n${stderr}`);
    }),
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`the control plane did not start within 90 s:\n${stderr}`)), 90_000).unref()),
  ]);
  const info = JSON.parse(line) as { kubeconfig: string; feos: string };
  const kc = new KubeConfig();
  kc.loadFromFile(info.kubeconfig);
  const caPem = Buffer.from(kc.getCurrentCluster()!.caData!, 'base64').toString('utf8');
  return { kubeconfig: info.kubeconfig, feos: info.feos, caPem, proc, exited, logs: () => stderr };
}

function run(cmd: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

const code = (err: unknown) => (err as { code?: number }).code;
/** A WireGuard public key's form: 32 random bytes, base64 (the control plane checks the form only). */
const wgKey = () => randomBytes(32).toString('base64');

/** A stand-in node: its identity, its NodeService client, its mesh and node connection. */
interface StandIn {
  name: string;
  key: NodeKey;
  chainPem: string;
  wgKey: string;
  ns: ReturnType<typeof nodeService>;
  mesh: MeshStandIn;
  conn?: NodeConnection;
}

test('the mesh: a /64 chosen once, /96s kept and freed, peers put whole then in deltas', { timeout: 300_000 }, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'k32-mesh-'));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  let cp = await startControlPlane(t, dataDir, ['--feos-mesh-node-limit', '2']);
  const kubectl = (...args: string[]) => run('kubectl', ['--kubeconfig', cp.kubeconfig, '--cache-dir', join(dataDir, 'kc-cache'), ...args]);
  const token = await run(process.execPath, [CLI, 'feos', 'token', 'create', '--kubeconfig', cp.kubeconfig]);
  assert.equal(token.code, 0, token.stderr);
  const tokenSecret = /^feos-join-([a-z0-9]{6}-[a-z0-9]{16})\./.exec(token.stdout)![1]!;

  const nodes: Record<string, StandIn> = {};
  for (const name of ['mesh-a', 'mesh-b', 'mesh-c']) {
    const key = await makeKey();
    const joined = await joinNode(cp.feos, cp.caPem, tokenSecret, name, await makeCsr(key));
    const ns = nodeService(cp.feos, cp.caPem, key, joined.chainPem);
    t.after(() => ns.close());
    nodes[name] = { name, key, chainPem: joined.chainPem, wgKey: wgKey(), ns, mesh: new MeshStandIn() };
  }
  const a = nodes['mesh-a']!;
  const b = nodes['mesh-b']!;
  const c = nodes['mesh-c']!;
  const connect = async (n: StandIn) => {
    const [host, port] = [cp.feos.slice(0, cp.feos.lastIndexOf(':')), Number(cp.feos.slice(cp.feos.lastIndexOf(':') + 1))];
    n.conn = await dialNodeConnection(host, port, cp.caPem, n.key, n.chainPem, 'pod0000000a', (server) => n.mesh.serve(server));
    t.after(() => n.conn?.close());
  };

  // --- before any node sent a key: not meshed, no ConfigMap
  const unmeshed = await c.ns.joinMesh({});
  assert.deepEqual([unmeshed.meshed, unmeshed.clusterPrefix, unmeshed.nodePrefix], [false, '', '']);

  // --- bad keys and endpoints: INVALID_ARGUMENT, saying what to fix
  for (const [publicKey, endpoint, why] of [
    ['not-a-key', '127.0.0.1:51820', /public_key "not-a-key" is not a WireGuard key: want 32 bytes in standard base64/],
    [randomBytes(31).toString('base64'), '127.0.0.1:51820', /is not a WireGuard key/],
    [a.wgKey, 'localhost:51820', /endpoint "localhost:51820" is not host:port: want IPv4:PORT or \[IPv6\]:PORT/],
    [a.wgKey, '127.0.0.1', /endpoint "127\.0\.0\.1" is not host:port/],
    [a.wgKey, '127.0.0.1:0', /with a port from 1 to 65535/],
    [a.wgKey, '::1:51820', /is not host:port/],
  ] as const) {
    const err = await a.ns.joinMesh({ publicKey, endpoint }).then(
      () => assert.fail(`JoinMesh with ${publicKey} ${endpoint} was answered`),
      (e: unknown) => e,
    );
    assert.equal(code(err), 3, `${publicKey} ${endpoint}: INVALID_ARGUMENT, got ${String(err)}`);
    assert.match((err as { details: string }).details, why);
  }
  assert.notEqual((await kubectl('-n', 'kube-system', 'get', 'configmap', 'feos-mesh')).code, 0, 'a refused JoinMesh chooses no /64');

  // --- the /64 and the /96s
  const ja = await a.ns.joinMesh({ publicKey: a.wgKey, endpoint: '127.0.0.1:51820' });
  assert.equal(ja.meshed, true);
  assert.match(ja.clusterPrefix, /^fd[0-9a-f]{2}:[0-9a-f:]+\/64$/, 'a ULA /64 (RFC 4193: fd and a random Global ID)');
  assert.match(ja.nodePrefix, /\/96$/);
  const ula = new BlockList();
  ula.addSubnet(ja.clusterPrefix.split('/')[0]!, 64, 'ipv6');
  const inUla = (p: string) => ula.check(p.split('/')[0]!, 'ipv6');
  assert.ok(inUla(ja.nodePrefix), `${ja.nodePrefix} lies in ${ja.clusterPrefix}`);
  const jb = await b.ns.joinMesh({ publicKey: b.wgKey, endpoint: '[::1]:51820' });
  assert.equal(jb.clusterPrefix, ja.clusterPrefix, 'one /64 for the cluster');
  assert.ok(inUla(jb.nodePrefix));
  assert.notEqual(jb.nodePrefix, ja.nodePrefix, 'each node a /96 of its own');
  assert.deepEqual(await a.ns.joinMesh({ publicKey: a.wgKey, endpoint: '127.0.0.1:51820' }), ja, 'JoinMesh again: the same answer');
  // A node with --pod-prefix (no key) learns that the cluster is meshed, and gets no /96.
  const keyless = await c.ns.joinMesh({});
  assert.deepEqual([keyless.meshed, keyless.clusterPrefix, keyless.nodePrefix], [true, ja.clusterPrefix, '']);
  // Another node's key: ALREADY_EXISTS; past the limit: RESOURCE_EXHAUSTED.
  const twin = await c.ns.joinMesh({ publicKey: a.wgKey, endpoint: '127.0.0.1:51822' }).catch((e: unknown) => e);
  assert.equal(code(twin), 6, String(twin));
  assert.match((twin as { details: string }).details, /node mesh-a holds the mesh key/);
  const full = await c.ns.joinMesh({ publicKey: c.wgKey, endpoint: '127.0.0.1:51822' }).catch((e: unknown) => e);
  assert.equal(code(full), 8, `RESOURCE_EXHAUSTED, got ${String(full)}`);
  assert.match((full as { details: string }).details, /every \/96 of the mesh is taken: 2 nodes hold one \(--feos-mesh-node-limit 2\)/);

  // What kubectl shows: the record.
  const cm = JSON.parse((await kubectl('-n', 'kube-system', 'get', 'configmap', 'feos-mesh', '-o', 'json')).stdout) as { data: Record<string, string> };
  assert.equal(cm.data['cluster-prefix'], ja.clusterPrefix);
  const recorded = JSON.parse(cm.data.nodes!) as Record<string, { prefix: string; publicKey: string; endpoint: string }>;
  assert.deepEqual(Object.keys(recorded).sort(), ['mesh-a', 'mesh-b']);
  assert.deepEqual([recorded['mesh-a']!.prefix, recorded['mesh-a']!.publicKey, recorded['mesh-a']!.endpoint], [ja.nodePrefix, a.wgKey, '127.0.0.1:51820']);

  // --- the peers: put whole at connect, each node every other
  a.mesh.joined(ja.clusterPrefix, ja.nodePrefix, a.wgKey, '127.0.0.1:51820');
  b.mesh.joined(jb.clusterPrefix, jb.nodePrefix, b.wgKey, '[::1]:51820');
  await connect(a);
  await connect(b);
  const peersOf = (n: StandIn) => n.mesh.peers();
  await waitFor('mesh-a has mesh-b as its peer', 20_000, () => peersOf(a)['mesh-b']?.endpoint === '[::1]:51820');
  await waitFor('mesh-b has mesh-a as its peer', 20_000, () => peersOf(b)['mesh-a']?.endpoint === '127.0.0.1:51820');
  assert.deepEqual(peersOf(a), { 'mesh-b': { endpoint: '[::1]:51820', prefix: jb.nodePrefix, publicKey: b.wgKey } });
  assert.deepEqual(peersOf(b), { 'mesh-a': { endpoint: '127.0.0.1:51820', prefix: ja.nodePrefix, publicKey: a.wgKey } });
  assert.equal(a.mesh.calls[0]?.method, 'put', 'the first call at connect is a whole put');
  assert.equal(a.mesh.mesh.version, b.mesh.mesh.version, "one version for the record's state, whichever node");
  // A node connection of a node not on the mesh gets nothing.
  await connect(c);

  // --- a change: a delta from the node's version
  const v1 = a.mesh.mesh.version;
  const callsBefore = a.mesh.calls.length;
  await b.ns.joinMesh({ publicKey: b.wgKey, endpoint: '[::1]:51821' });
  await waitFor("mesh-a has mesh-b's new endpoint", 20_000, () => peersOf(a)['mesh-b']?.endpoint === '[::1]:51821');
  const delta = a.mesh.calls.slice(callsBefore);
  assert.deepEqual(
    delta.map((x) => [x.method, x.from, x.peers?.map((p) => p.nodeName), x.remove, x.refused]),
    [['update', v1, ['mesh-b'], [], undefined]],
    'one UpdateMeshPeers from the version the node has, putting the changed peer',
  );
  assert.ok(a.mesh.mesh.version > v1);
  assert.equal(peersOf(b)['mesh-a']?.endpoint, '127.0.0.1:51820');
  assert.deepEqual(c.mesh.calls, [], 'a node connection of a node not on the mesh gets no peers');

  // --- the node has another version (it lost its record, another instance moved it): FAILED_PRECONDITION, then a whole put
  a.mesh.mesh.version = 7n;
  const callsThen = a.mesh.calls.length;
  await b.ns.joinMesh({ publicKey: b.wgKey, endpoint: '[::1]:51822' });
  await waitFor("mesh-a has mesh-b's newest endpoint", 20_000, () => peersOf(a)['mesh-b']?.endpoint === '[::1]:51822');
  const mended = a.mesh.calls.slice(callsThen);
  assert.deepEqual(
    mended.map((x) => [x.method, x.refused]),
    [
      ['update', 'FAILED_PRECONDITION'],
      ['put', undefined],
    ],
  );
  assert.deepEqual(mended[1]!.peers!.map((p) => [p.nodeName, p.endpoint]), [['mesh-b', '[::1]:51822']]);

  // --- kubectl delete node: its /96 is freed, it leaves the other nodes' peers
  const del = await kubectl('delete', 'node', 'mesh-b');
  assert.equal(del.code, 0, del.stderr);
  await waitFor('mesh-b leaves the peers of mesh-a', 20_000, () => Object.keys(peersOf(a)).length === 0);
  assert.deepEqual(a.mesh.calls.at(-1)!.remove, ['mesh-b'], 'an UpdateMeshPeers removing it');
  await waitFor('the record no longer holds mesh-b', 20_000, async () => {
    const r = JSON.parse((await kubectl('-n', 'kube-system', 'get', 'configmap', 'feos-mesh', '-o', 'json')).stdout) as { data: Record<string, string> };
    return !Object.hasOwn(JSON.parse(r.data.nodes!) as object, 'mesh-b');
  });
  const jc = await c.ns.joinMesh({ publicKey: c.wgKey, endpoint: '127.0.0.1:51822' });
  assert.ok(inUla(jc.nodePrefix), 'the freed /96 lets another node on the mesh');
  c.mesh.joined(jc.clusterPrefix, jc.nodePrefix, c.wgKey, '127.0.0.1:51822');
  await waitFor('mesh-a has mesh-c as its peer', 20_000, () => peersOf(a)['mesh-c']?.prefix === jc.nodePrefix);
  await waitFor('mesh-c has mesh-a as its peer', 30_000, () => peersOf(c)['mesh-a']?.prefix === ja.nodePrefix);

  // --- a restart of the control plane: the /64 and the /96s are kept; the peers are put whole at connect
  const version = a.mesh.mesh.version;
  cp.proc.kill('SIGTERM');
  await cp.exited;
  a.conn!.close();
  c.conn!.close();
  cp = await startControlPlane(t, dataDir, ['--feos-mesh-node-limit', '2']);
  a.ns.close();
  a.ns = nodeService(cp.feos, cp.caPem, a.key, a.chainPem);
  t.after(() => a.ns.close());
  assert.deepEqual(await a.ns.joinMesh({ publicKey: a.wgKey, endpoint: '127.0.0.1:51820' }), ja, 'the same /64 and /96 after the restart');
  const afterRestart = a.mesh.calls.length;
  await connect(a);
  await waitFor('mesh-a is put its peers whole at connect', 20_000, () => a.mesh.calls.slice(afterRestart).some((x) => x.method === 'put' && !x.refused));
  assert.equal(a.mesh.mesh.version, version, 'the same version: nothing changed');
  assert.deepEqual(Object.keys(peersOf(a)), ['mesh-c']);
});

test('control-plane refuses a bad --feos-mesh-node-limit before starting anything', { timeout: 60_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'k32-mesh-flags-'));
  try {
    for (const v of ['0', '4097', 'many', '-1']) {
      const r = await run(process.execPath, [CLI, 'control-plane', '--data-dir', join(dir, 'd'), '--port', '0', '--feos-listen', '127.0.0.1:0', '--feos-mesh-node-limit', v]);
      assert.equal(r.code, 1, `${v}: ${r.stderr}`);
      assert.match(r.stderr, new RegExp(`^error: --feos-mesh-node-limit "${v}": want a whole number from 1 to 4096`));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
