// The mesh's node side without a device (seed 000, "The mesh"): the key (0600, made once, the public key
// wg derives), mesh.pb kept whole and read back, MeshService's rules (INVALID_ARGUMENT for bad peers,
// FAILED_PRECONDITION without a mesh or from another version) over gRPC with a client of our protos,
// and the fleet client's JoinMesh against a stand-in control plane: after the first answered report,
// again while an answer is not taken, and none with a key for a node with --pod-prefix.
// The root suite test/root/feos-network/mesh-node.test.ts runs the devices and the pods.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { fromBinary } from '@bufbuild/protobuf';
import { tempDir, until } from './harness.ts';
import { joinToken, joiningHandlers, makeCa, serverCert, startStandIn } from './fleet-standin.ts';
import { startFleet } from '../../src/feos/fleet/index.ts';
import { createLogger } from '../../src/lib/index.ts';
import { NodeMesh, grpcServiceDefinition, parseEndpoint, publicKeyOf } from '../../src/feos/network/index.ts';
import { MeshSchema, MeshService, type GetMeshResponse } from '../../src/feos/gen/feos/network/v1/network_pb.js';
import type { PodEvent, PodInfo } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';

const { dir, cleanup } = tempDir('k32t-mesh-');
const log = createLogger('mesh-test');
const CLUSTER = 'fd12:3456:789a:1::/64';
const KEY_B = publicKeyOf(Buffer.alloc(32, 9).toString('base64'));
const peerB = { nodeName: 'node-b', publicKey: KEY_B, endpoint: '192.0.2.2:51820', prefix: 'fd12:3456:789a:1:0:2::/96' };

const closers: Array<() => Promise<void> | void> = [];
after(async () => {
  for (const c of closers.reverse()) await c();
  cleanup();
});

/** MeshService of a NodeMesh on a unix socket, and a client of the same proto. */
async function serve(mesh: NodeMesh, name: string): Promise<(method: string, req: unknown) => Promise<unknown>> {
  const server = new grpc.Server();
  const svc = mesh.grpcService();
  server.addService(svc.definition, svc.implementation);
  const path = join(dir, `${name}.sock`);
  await new Promise<void>((resolve, reject) => server.bindAsync(`unix:${path}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())));
  const Ctor = grpc.makeGenericClientConstructor(grpcServiceDefinition(MeshService), 'MeshService');
  const client = new Ctor(`unix:${path}`, grpc.credentials.createInsecure());
  closers.push(() => {
    client.close();
    server.forceShutdown();
  });
  return (method, req) =>
    new Promise((resolve, reject) => {
      (client as unknown as Record<string, (...a: unknown[]) => void>)[method].call(client, req, { deadline: Date.now() + 10_000 }, (err: grpc.ServiceError | null, r: unknown) =>
        err ? reject(err) : resolve(r),
      );
    });
}

const code = (c: number, re: RegExp) => (e: { code: number; details: string }) => e.code === c && re.test(e.details);

test('the key: 0600, made once, its public key as wg derives it', { timeout: 30_000 }, async () => {
  const nodeDir = join(dir, 'keyed');
  const m = new NodeMesh({ nodeDir, log }, true);
  await m.load();
  const file = join(nodeDir, 'mesh', 'key');
  assert.equal(statSync(file).mode & 0o777, 0o600);
  assert.equal(statSync(join(nodeDir, 'mesh')).mode & 0o777, 0o700);
  const key = readFileSync(file, 'utf8').trim();
  assert.match(key, /^[A-Za-z0-9+/]{43}=$/);
  const wg = execFileSync('wg', ['pubkey'], { input: `${key}\n` }).toString().trim();
  assert.equal(m.publicKey, wg);
  const again = new NodeMesh({ nodeDir, log }, true);
  await again.load();
  assert.equal(again.publicKey, m.publicKey, 'made once');
  assert.deepEqual(m.joinAsk('10.0.0.5'), { publicKey: wg, endpoint: '10.0.0.5:51820' });
  assert.equal(new NodeMesh({ nodeDir, log, address: '2001:db8::7', port: 4000 }, true).joinAsk('10.0.0.5').endpoint, '[2001:db8::7]:4000', '--mesh-address wins');
  assert.deepEqual(new NodeMesh({ nodeDir: join(dir, 'unkeyed'), log }, false).joinAsk('10.0.0.5'), { publicKey: '', endpoint: '' }, '--pod-prefix: no key');
  assert.throws(() => new NodeMesh({ nodeDir, log, port: 70000 }, true), /--mesh-port 70000/);
  assert.throws(() => new NodeMesh({ nodeDir, log, address: 'node-a' }, true), /--mesh-address node-a: not an IP address/);
});

test('endpoints parse as host:port with brackets for IPv6', () => {
  assert.deepEqual(parseEndpoint('192.0.2.1:51820'), { address: '192.0.2.1', port: 51820 });
  assert.deepEqual(parseEndpoint('[2001:DB8::1]:7'), { address: '2001:db8::1', port: 7 });
  for (const bad of ['2001:db8::1:51820', 'host:1', '192.0.2.1', '192.0.2.1:0', '[192.0.2.1]:5']) assert.throws(() => parseEndpoint(bad), RangeError, bad);
});

test('MeshService: FAILED_PRECONDITION without a mesh, peers kept in mesh.pb, INVALID_ARGUMENT for bad ones, deltas only from the version', { timeout: 30_000 }, async () => {
  const nodeDir = join(dir, 'svc');
  const m = new NodeMesh({ nodeDir, log }, true);
  await m.load();
  const call = await serve(m, 'svc');
  await assert.rejects(call('PutMeshPeers', { version: 1n, peers: [peerB] }), code(9, /no mesh yet/));
  // The answer without a /96 is not taken (the fleet asks again); one with it is kept.
  assert.equal(await m.joined(m.joinAsk('192.0.2.1'), { meshed: false, clusterPrefix: '', nodePrefix: '' }), false);
  let given: string | undefined;
  m.onPrefix = (p) => {
    given = `${p.length}`;
  };
  assert.equal(await m.joined(m.joinAsk('192.0.2.1'), { meshed: true, clusterPrefix: CLUSTER, nodePrefix: 'fd12:3456:789a:1:0:1::/96' }), true);
  assert.equal(given, '96', 'the network hears of its /96');
  await assert.rejects(
    m.joined(m.joinAsk('192.0.2.1'), { meshed: true, clusterPrefix: CLUSTER, nodePrefix: 'fd00:9::/96' }),
    /not a prefix of the cluster's/,
  );
  for (const [bad, re] of [
    [{ ...peerB, publicKey: 'abc' }, /not a WireGuard key/],
    [{ ...peerB, endpoint: 'node-b:51820' }, /not an IP address/],
    [{ ...peerB, prefix: 'fd12:3456:789a:1::/80' }, /not a \/96 of the cluster's ULA/],
    [{ ...peerB, prefix: 'fd99::/96' }, /not a \/96 of the cluster's ULA/],
    [{ ...peerB, prefix: 'fd12:3456:789a:1:0:2::1/96' }, /prefix:/],
  ] as const) {
    await assert.rejects(call('PutMeshPeers', { version: 1n, peers: [bad] }), code(3, re));
  }
  await assert.rejects(call('PutMeshPeers', { version: 1n, peers: [peerB, { ...peerB, publicKey: KEY_B }] }), code(3, /two peers of one node name/));
  await assert.rejects(call('PutMeshPeers', { version: 1n, peers: [peerB, { ...peerB, nodeName: 'node-x' }] }), code(3, /two peers of one public key/));
  await assert.rejects(call('PutMeshPeers', { version: 1n, peers: [{ ...peerB, publicKey: m.publicKey }] }), code(3, /the node's own public key/));
  await assert.rejects(call('PutMeshPeers', { version: 1n, peers: [{ ...peerB, prefix: 'fd12:3456:789a:1:0:1::/96' }] }), code(3, /is the node's own/));
  await call('PutMeshPeers', { version: 4n, peers: [peerB] });
  const kept = fromBinary(MeshSchema, readFileSync(join(nodeDir, 'mesh', 'mesh.pb')));
  assert.equal(statSync(join(nodeDir, 'mesh', 'mesh.pb')).mode & 0o777, 0o600);
  assert.equal(kept.version, 4n);
  assert.equal(kept.clusterPrefix, CLUSTER);
  assert.equal(kept.nodePrefix, 'fd12:3456:789a:1:0:1::/96');
  assert.equal(kept.implementation, '', 'the device facts are not kept');
  assert.deepEqual(kept.peers.map((p) => [p.nodeName, p.publicKey, p.endpoint, p.prefix]), [['node-b', KEY_B, '192.0.2.2:51820', 'fd12:3456:789a:1:0:2::/96']]);
  assert.doesNotMatch(readFileSync(join(nodeDir, 'mesh', 'mesh.pb')).toString('latin1'), new RegExp(readFileSync(join(nodeDir, 'mesh', 'key'), 'utf8').trim().replace(/[+/=]/g, '.')), 'no private key in mesh.pb');
  await assert.rejects(call('UpdateMeshPeers', { fromVersion: 3n, toVersion: 5n, put: [], remove: ['node-b'] }), code(9, /version 4, not 3/));
  const peerC = { nodeName: 'node-c', publicKey: publicKeyOf(Buffer.alloc(32, 3).toString('base64')), endpoint: '[2001:db8::3]:51820', prefix: 'fd12:3456:789a:1:0:3::/96' };
  await call('UpdateMeshPeers', { fromVersion: 4n, toVersion: 2n, put: [peerC], remove: ['node-b'] });
  const r = (await call('GetMesh', {})) as GetMeshResponse;
  assert.equal(r.mesh!.version, 2n, 'a version the control plane chooses, which need not grow');
  assert.deepEqual(r.mesh!.peers.map((p) => p.nodeName), ['node-c']);
  assert.equal(r.mesh!.publicKey, m.publicKey);
  assert.equal(r.mesh!.listenPort, 51820);
  assert.equal(r.mesh!.device, 'feos-mesh');
  assert.deepEqual(m.peerAddresses(), ['2001:db8::3'], "the peers' endpoints, denied to pods");
  // Read back at a start.
  const again = new NodeMesh({ nodeDir, log }, true);
  await again.load();
  assert.equal(again.view().version, 2n);
  assert.equal(again.view().nodePrefix, 'fd12:3456:789a:1:0:1::/96');
  // A node with --pod-prefix is on no mesh.
  const unkeyed = new NodeMesh({ nodeDir: join(dir, 'pp'), log }, false);
  await unkeyed.load();
  const callU = await serve(unkeyed, 'pp');
  await assert.rejects(callU('PutMeshPeers', { version: 1n, peers: [] }), code(9, /--pod-prefix/));
});

class Pods extends EventEmitter<{ event: [PodEvent] }> {
  list(): PodInfo[] {
    return [];
  }
}

test('the fleet client calls JoinMesh after the first answered report, again while not taken, and keeps the answer', { timeout: 60_000 }, async () => {
  const SECRET = 'abcdef-0123456789abcdef';
  const ca = await makeCa();
  let answers = 0;
  const cp = await startStandIn(ca, await serverCert(ca, { dns: ['cp.test'], ip: ['127.0.0.1'], uri: ['spiffe://feos.local/ferun'] }), {
    ...joiningHandlers(ca, { secret: SECRET, reportIntervalMs: 200 }),
    // Not meshed at first: the node asks again.
    JoinMesh: (req: { publicKey: string }) =>
      answers++ < 1 ? { meshed: false } : { meshed: true, clusterPrefix: CLUSTER, nodePrefix: req.publicKey ? 'fd12:3456:789a:1:0:7::/96' : '' },
  });
  closers.push(() => cp.close());
  writeFileSync(join(dir, 'token'), joinToken(SECRET, ca));
  const nodeDir = join(dir, 'fleet-node');
  const mesh = new NodeMesh({ nodeDir, log, port: 51999 }, true);
  await mesh.load();
  const fleet = startFleet(
    { controlPlane: cp.address, controlPlaneName: 'cp.test', trustDomain: 'feos.local', joinTokenFile: join(dir, 'token'), nodeDir, nodeName: 'm1' },
    { services: [], pods: new Pods(), accelerator: 'tcg', guestVersions: () => [], version: 'test', log, mesh },
  );
  closers.push(() => fleet.stop(100));
  await until('the /96 kept', async () => (mesh.nodePrefix ? true : undefined), 30_000);
  const methods = cp.calls.map((c) => c.method);
  assert.ok(methods.indexOf('Report') < methods.indexOf('JoinMesh'), `JoinMesh after a report: ${methods.slice(0, 8)}`);
  const joins = cp.calls.filter((c) => c.method === 'JoinMesh');
  assert.equal(joins.length, 2, 'asked again once, after the answer not taken');
  assert.deepEqual(joins[0]!.request, joins[1]!.request);
  const req = joins[0]!.request as { publicKey: string; endpoint: string };
  assert.equal(req.publicKey, mesh.publicKey);
  assert.equal(req.endpoint, '127.0.0.1:51999', 'the address from which the node reaches the control plane, at --mesh-port');
  assert.equal(fromBinary(MeshSchema, readFileSync(join(nodeDir, 'mesh', 'mesh.pb'))).nodePrefix, 'fd12:3456:789a:1:0:7::/96');
  // Taken: no more JoinMesh while the key and endpoint stay.
  const reports = cp.calls.filter((c) => c.method === 'Report').length;
  await until('3 more reports', async () => (cp.calls.filter((c) => c.method === 'Report').length >= reports + 3 ? true : undefined), 20_000);
  assert.equal(cp.calls.filter((c) => c.method === 'JoinMesh').length, 2);
});
