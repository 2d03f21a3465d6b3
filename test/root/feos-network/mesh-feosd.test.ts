// The mesh in a real feosd (seed 000, "The mesh"): feosd with --control-plane and no --pod-prefix in a
// network namespace of its own (a veth pair to the host's, as the fleet suites), joined to the fleet's
// stand-in control plane (test/feos/fleet-standin.ts) on the host side of the pair. After a report it
// calls JoinMesh with its key and endpoint; the answer's /96 brings its network and its wireguard-go
// device up; the stand-in sends the peers over the node connection (PutMeshPeers); `feosctl mesh get`
// shows them; a restart keeps the key, the prefix and the peers. No microVM.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { fromBinary } from '@bufbuild/protobuf';
import { PutMeshPeersRequestSchema, PutMeshPeersResponseSchema, MeshSchema } from '../../../src/feos/gen/feos/network/v1/network_pb.js';
import { publicKeyOf } from '../../../src/feos/network/index.ts';
import { feosctl, tempDir } from '../../feos/harness.ts';
import { callStream, joinToken, joiningHandlers, makeCa, serverCert, startStandIn } from '../../feos/fleet-standin.ts';
import { waitFor } from '../../helpers/wait.ts';
import { Nets, must, startNode, type FleetNode } from '../fleet/helpers.ts';
import { readFileSync } from 'node:fs';

const SECRET = 'abcdef-0123456789abcdef';
const CLUSTER = 'fd12:3456:789a:7::/64';
const PREFIX = 'fd12:3456:789a:7:0:3::/96';
const PORT = 51830;
const { dir, cleanup } = tempDir('k32t-meshd-');
const nets = new Nets();
const net = await nets.add('meshd');
const device = `wg${net.ns.slice(5, 11)}d`;
const ca = await makeCa();
const joins: Array<{ publicKey: string; endpoint: string }> = [];
const cp = await startStandIn(
  ca,
  await serverCert(ca, { dns: ['cp.test'], uri: ['spiffe://feos.local/ferun'] }),
  {
    ...joiningHandlers(ca, { secret: SECRET, reportIntervalMs: 500 }),
    JoinMesh: (req: { publicKey: string; endpoint: string }) => {
      joins.push({ publicKey: req.publicKey, endpoint: req.endpoint });
      return { meshed: true, clusterPrefix: CLUSTER, nodePrefix: req.publicKey ? PREFIX : '' };
    },
  },
  0,
  net.host,
);
let node: FleetNode | undefined;
after(async () => {
  await node?.proc.stop();
  await cp.close();
  await nets.removeAll();
  rmSync(`/var/run/wireguard/${device}.sock`, { force: true });
  cleanup();
});

const meshGet = async () => {
  const r = await feosctl(node!.proc.socket, ['mesh', 'get', '-o', 'json']);
  assert.equal(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout) as { mesh: Record<string, unknown> }).mesh;
};
const describe = () => node?.proc.stderr().split('\n').slice(-30).join('\n') ?? '';
const peerKey = publicKeyOf(Buffer.alloc(32, 5).toString('base64'));

test('feosd joins the mesh after a report: JoinMesh with its key and endpoint, its /96 brings the network and the device up', { timeout: 120_000 }, async () => {
  node = await startNode(join(dir, 'n'), 'm1', net, cp.port, 'cp.test', joinToken(SECRET, ca), ['--mesh-device', device, '--mesh-port', String(PORT)]);
  await waitFor('the /96 in feosctl mesh get', 60_000, async () => ((await meshGet()).nodePrefix === PREFIX ? true : undefined), { describe, intervalMs: 500 });
  const methods = cp.calls.map((c) => c.method);
  assert.ok(methods.indexOf('Report') < methods.indexOf('JoinMesh'), `JoinMesh after a report: ${methods.slice(0, 6)}`);
  assert.equal(joins[0]!.endpoint, `${net.node}:${PORT}`, 'the address from which it reaches the control plane, at --mesh-port');
  const key = readFileSync(join(node.nodeDir, 'mesh', 'key'), 'utf8').trim();
  assert.equal(joins[0]!.publicKey, publicKeyOf(key));
  await waitFor("the pods' network up", 30_000, async () => node!.proc.stderr().includes("the pods' network is up on the mesh's /96"), { describe, intervalMs: 200 });
  const m = await meshGet();
  assert.equal(m.clusterPrefix, CLUSTER);
  assert.equal(m.implementation, 'wireguard-go', 'no WireGuard module on these machines');
  assert.equal(m.device, device);
  assert.equal(m.listenPort, PORT);
  const routes = JSON.parse(await must('ip', ['netns', 'exec', net.ns, 'ip', '-j', '-6', 'route', 'show'])) as Array<{ dst: string; dev?: string; type?: string }>;
  assert.ok(routes.some((r) => r.dst === CLUSTER && r.dev === device), JSON.stringify(routes));
  assert.ok(routes.some((r) => r.dst === PREFIX && r.type === 'unreachable'), JSON.stringify(routes));
});

test('the control plane sends the peers over the node connection; feosctl mesh get and wg show them', { timeout: 60_000 }, async () => {
  const session = await waitFor('a node connection', 20_000, () => cp.nodeSessions.at(-1));
  const call = callStream(session, '/feos.network.v1.MeshService/PutMeshPeers', PutMeshPeersRequestSchema, PutMeshPeersResponseSchema, {
    version: 5n,
    peers: [{ nodeName: 'm2', publicKey: peerKey, endpoint: '192.0.2.7:51820', prefix: 'fd12:3456:789a:7:0:4::/96' }],
  });
  const end = await call.ended;
  assert.equal(end.status, '0', end.message);
  assert.equal(call.messages[0]!.mesh!.version, 5n);
  const text = await feosctl(node!.proc.socket, ['mesh', 'get']);
  assert.match(text.stdout, /m2\s+fd12:3456:789a:7:0:4::\/96\s+192\.0\.2\.7:51820/);
  const dump = await must('ip', ['netns', 'exec', net.ns, 'wg', 'show', device, 'dump']);
  assert.match(dump, new RegExp(`${peerKey.replace(/[+/]/g, (c) => `\\${c}`)}\\t\\(none\\)\\t192\\.0\\.2\\.7:51820\\tfd12:3456:789a:7:0:4::/96`));
  const kept = fromBinary(MeshSchema, readFileSync(join(node!.nodeDir, 'mesh', 'mesh.pb')));
  assert.equal(kept.version, 5n);
});

test('a restart keeps the key, the prefix and the peers, and asks JoinMesh again with the same key', { timeout: 120_000 }, async () => {
  const before = joins.length;
  const key = joins[0]!.publicKey;
  await node!.proc.stop();
  await node!.restart();
  const m = await meshGet();
  assert.equal(m.nodePrefix, PREFIX, 'kept at once');
  assert.equal(m.publicKey, key);
  assert.equal(m.version, '5');
  await waitFor('JoinMesh again', 60_000, () => joins.length > before, { describe, intervalMs: 200 });
  assert.equal(joins.at(-1)!.publicKey, key);
  assert.match(await must('ip', ['netns', 'exec', net.ns, 'wg', 'show', device, 'peers']), new RegExp(peerKey.replace(/[+/]/g, (c) => `\\${c}`)));
});
