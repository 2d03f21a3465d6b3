// The mesh's wireguard-go device when it cannot be had (seed 000, "The mesh"; docs/feos/network.md
// "When the mesh device cannot be made"). Each case makes its own network namespaces and device name:
// - a wireguard-go that is not there: a real feosd with --control-plane (the fleet's stand-in control
//   plane) and --wireguard-go naming no file says so in its log, with "apt-get install wireguard-go";
// - a wireguard-go that cannot make its TUN device (no /dev/net/tun in the node's mount namespace): the
//   network layer names the path, the exit status and wireguard-go's own words;
// - another namespace's wireguard-go behind the socket /var/run/wireguard/<device>.sock (shared by every
//   network namespace): a node in namespace B using node A's device name is refused, naming the
//   device and --mesh-device, with and without a TUN device of that name in B, and A's device keeps
//   its key, port and peers.
// After each case no wireguard-go of its device runs, its socket is gone and its namespaces too.

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { MeshService } from '../../../src/feos/gen/feos/network/v1/network_pb.js';
import { publicKeyOf } from '../../../src/feos/network/index.ts';
import { joiningHandlers, joinToken, makeCa, serverCert, startStandIn } from '../../feos/fleet-standin.ts';
import { tempDir } from '../../feos/harness.ts';
import { processesNaming, processName } from '../../helpers/processes.ts';
import { waitFor } from '../../helpers/wait.ts';
import { type FleetNode, Nets, startNode as startFleetNode } from '../fleet/helpers.ts';
import { control, grpcClient, inNs, must, Namespaces, type Started, startInNs } from './helpers.ts';

const NODE_FIXTURE = join(import.meta.dirname, 'fixture-node.ts');
const CLUSTER = 'fd12:3456:789a:9::/64';
const PREFIX = { a: 'fd12:3456:789a:9:0:1::/96', b: 'fd12:3456:789a:9:0:2::/96' } as const;
/** Node A's one peer, which B (with none) would remove from A's device if it took it for its own. */
const PEER = { nodeName: 'node-c', publicKey: publicKeyOf(Buffer.alloc(32, 9).toString('base64')), endpoint: '192.0.2.9:51820', prefix: 'fd12:3456:789a:9:0:3::/96' };

/** The wireguard-go processes of a device (its name on their command line). */
const wireguardGos = (device: string) => processesNaming(device).filter((pid) => processName(pid) === 'wireguard-go');

/** What each case leaves: no wireguard-go of its devices, no UAPI socket, none of its namespaces. */
async function assertGone(devices: string[], prefix: string): Promise<void> {
  for (const d of devices) {
    assert.deepEqual(wireguardGos(d), [], `no wireguard-go of ${d} left`);
    assert.equal(existsSync(`/var/run/wireguard/${d}.sock`), false, `no UAPI socket of ${d} left`);
  }
  const left = (await must(['ip', 'netns', 'list'])).split('\n').filter((l) => l.startsWith(prefix));
  assert.deepEqual(left, [], 'no namespace of the case left');
}

/** A node's network layer (fixture-node.ts) in namespace `ns` with the mesh on `device`, before its /96. */
async function startMeshNode(ns: string, dir: string, device: string, port: number, extra: Record<string, unknown> = {}, wrap: string[] = []): Promise<Started & { sock: string; grpc: string }> {
  await must(['mkdir', '-p', dir]);
  const config = {
    stateDir: join(dir, 'state'),
    grpcSocket: join(dir, 'grpc.sock'),
    controlSocket: join(dir, 'control.sock'),
    flags: { rulesIntervalMs: 3_600_000, trafficRecords: false, mesh: { nodeDir: join(dir, 'node'), device, port, implementation: 'wireguard-go', ...extra } },
    kept: [],
  };
  const started = await startInNs(ns, NODE_FIXTURE, [JSON.stringify(config)], 30_000, wrap);
  return { ...started, sock: config.controlSocket, grpc: config.grpcSocket };
}

/** JoinMesh's answer given by hand; answers the network's reason once it settled (null: up). */
async function joinAndSettle(sock: string, n: 'a' | 'b'): Promise<string | null> {
  const r = await control(sock, { method: 'joinMesh', localAddress: '10.0.0.1', answer: { meshed: true, clusterPrefix: CLUSTER, nodePrefix: PREFIX[n] } });
  assert.ok(r.ok, r.message ?? '');
  return waitFor('the network settled after the /96', 30_000, async () => {
    const reason = (await control<string | null>(sock, { method: 'unavailableReason' })).result;
    return reason === null || !/no \/96/.test(reason) ? { reason } : undefined;
  }).then((x) => x.reason);
}

/** `wg show DEVICE dump`'s first line in `ns`: the private key and the port. */
async function wgHead(ns: string, device: string): Promise<{ privateKey: string; publicKey: string; port: string }> {
  const [head] = (await must(inNs(ns, 'wg', 'show', device, 'dump'))).split('\n');
  const f = head.split('\t');
  return { privateKey: f[0], publicKey: f[1], port: f[2] };
}

/**
 * The cases of a describe, each a node in a namespace of its own on a mesh device named for this run
 * (`wg<run><suffix>`): the describe's directory, and an after() that stops the nodes pushed on `nodes`,
 * removes the namespaces and the directory, and checks that no device or process of the run is left.
 */
function meshCases<K extends string>(prefix: string, suffixes: Record<K, string>): { nss: Namespaces; devices: Record<K, string>; dir: string; nodes: Started[] } {
  const nss = new Namespaces();
  const devices = Object.fromEntries(Object.entries<string>(suffixes).map(([k, suffix]) => [k, `wg${nss.prefix.slice(5)}${suffix}`])) as Record<K, string>;
  const { dir, cleanup } = tempDir(prefix);
  const nodes: Started[] = [];
  after(async () => {
    for (const n of nodes) await n.stop();
    await nss.removeAll();
    cleanup();
    await assertGone(Object.values(devices), nss.prefix);
  });
  return { nss, devices, dir, nodes };
}

describe('feosd with --wireguard-go naming no file', { timeout: 120_000 }, () => {
  const SECRET = 'abcdef-0123456789abcdef';
  const { dir, cleanup } = tempDir('k32t-wgmiss-');
  const nets = new Nets();
  let device = '';
  let prefix = '';
  let node: FleetNode | undefined;
  let cp: Awaited<ReturnType<typeof startStandIn>> | undefined;

  before(async () => {
    const net = await nets.add('wgmiss');
    prefix = net.ns.slice(0, 11);
    device = `wg${net.ns.slice(5, 11)}m`;
    const ca = await makeCa();
    cp = await startStandIn(
      ca,
      await serverCert(ca, { dns: ['cp.test'], uri: ['spiffe://feos.local/ferun'] }),
      {
        ...joiningHandlers(ca, { secret: SECRET, reportIntervalMs: 500 }),
        JoinMesh: (req: { publicKey: string }) => ({ meshed: true, clusterPrefix: CLUSTER, nodePrefix: req.publicKey ? PREFIX.a : '' }),
      },
      0,
      net.host,
    );
    node = await startFleetNode(join(dir, 'n'), 'wgmiss', net, cp.port, 'cp.test', joinToken(SECRET, ca), ['--mesh-device', device, '--wireguard-go', '/nonexistent/wireguard-go']);
  });

  after(async () => {
    await node?.proc.stop();
    await cp?.close();
    await nets.removeAll();
    cleanup();
    await assertGone([device], prefix);
  });

  it('says in its log that wireguard-go is not installed, where it looked, and the apt-get to run', async () => {
    const line = await waitFor("feosd's log of the network not up", 60_000, () => node!.proc.stderr().split('\n').find((l) => l.includes("the pods' network is not up") && !l.includes('no /96')), {
      describe: () => node!.proc.stderr().split('\n').slice(-20).join('\n'),
      intervalMs: 200,
    });
    const { reason } = JSON.parse(line) as { reason: string };
    assert.match(reason, new RegExp(`the mesh device ${device}: .*wireguard-go is not installed \\(no file /nonexistent/wireguard-go\\): apt-get install wireguard-go, or give its path with --wireguard-go`));
    assert.doesNotMatch(reason, /timed out|no answer within/);
  });
});

describe('the network layer when wireguard-go cannot run', { timeout: 60_000 }, () => {
  const { nss, devices, dir, nodes } = meshCases('k32t-wgrun-', { path: 'p', tun: 't' });

  it('says wireguard-go is not installed when PATH lacks it, naming PATH and the apt-get to run', async () => {
    const device = devices.path;
    // A PATH with the tools the network layer runs but wireguard-go.
    const bin = join(dir, 'bin');
    await must(['mkdir', '-p', bin]);
    for (const tool of ['ip', 'nft', 'conntrack', 'wg']) await must(['ln', '-s', (await must(['sh', '-c', `command -v ${tool}`])).trim(), join(bin, tool)]);
    const ns = await nss.add('path');
    const node = await startMeshNode(ns, join(dir, device), device, 51840, {}, ['env', `PATH=${bin}`]);
    nodes.push(node);
    const reason = await joinAndSettle(node.sock, 'a');
    assert.match(reason ?? '', new RegExp(`the mesh device ${device}: .*wireguard-go is not installed \\(no wireguard-go in PATH \\(${bin}\\)\\): apt-get install wireguard-go`));
  });

  it('names wireguard-go, its exit status and what it said when it cannot make its TUN device', async () => {
    const device = devices.tun;
    const ns = await nss.add('tun');
    // The node's own mount namespace, with /dev/null where /dev/net/tun was.
    const wrap = ['unshare', '-m', '--propagation', 'private', 'sh', '-c', 'mount --bind /dev/null /dev/net/tun && exec "$@"', 'sh'];
    const node = await startMeshNode(ns, join(dir, device), device, 51841, {}, wrap);
    nodes.push(node);
    const reason = await joinAndSettle(node.sock, 'a');
    assert.match(reason ?? '', new RegExp(`the mesh device ${device}: .*\`/usr/bin/wireguard-go ${device}\` exited with status 1: .*Failed to create TUN device`));
  });
});

describe("a node whose mesh device name is another namespace's node's", { timeout: 120_000 }, () => {
  // A device name of each case: case 1's wireguard-go must not be what case 2 finds.
  const { nss, devices, dir, nodes } = meshCases('k32t-wgns-', { absent: 'x', tun: 'y' });

  /** Node A in a namespace of its own with its mesh up on `device`; answers its namespace and its device's head. */
  async function nodeA(device: string, port: number): Promise<{ ns: string; head: Awaited<ReturnType<typeof wgHead>> }> {
    const ns = await nss.add(`a${device.at(-1)}`);
    const a = await startMeshNode(ns, join(dir, `a-${device}`), device, port);
    nodes.push(a);
    assert.equal(await joinAndSettle(a.sock, 'a'), null, "node A's network up");
    const mesh = grpcClient(MeshService, a.grpc);
    try {
      await mesh.call('PutMeshPeers', { version: 1n, peers: [PEER] });
    } finally {
      mesh.close();
    }
    assert.equal(wireguardGos(device).length, 1, `A's wireguard-go of ${device}`);
    return { ns, head: await wgHead(ns, device) };
  }

  const refusal = (device: string) =>
    new RegExp(`the mesh device ${device}: its UAPI socket /var/run/wireguard/${device}\\.sock is served by wireguard-go \\(pid \\d+\\) in another network namespace .*give this node another mesh device name with --mesh-device`);

  it('is refused before its wireguard-go starts when the device is not in its namespace, naming the device and --mesh-device', async () => {
    const device = devices.absent;
    const a = await nodeA(device, 51842);
    const ns = await nss.add(`b${device.at(-1)}`);
    const b = await startMeshNode(ns, join(dir, `b-${device}`), device, 51843);
    nodes.push(b);
    assert.match((await joinAndSettle(b.sock, 'b')) ?? '', refusal(device));
    assert.equal(wireguardGos(device).length, 1, 'no second wireguard-go');
    assert.deepEqual(await wgHead(a.ns, device), a.head, "A's device keeps its key and port");
  });

  it("is refused when a TUN device of that name is in its namespace, and A's device keeps its key, port and peers", async () => {
    const device = devices.tun;
    const a = await nodeA(device, 51844);
    const ns = await nss.add(`b${device.at(-1)}`);
    // A TUN device of the name in B, as a wireguard-go of B whose socket A's replaced would leave.
    await must(inNs(ns, 'ip', 'tuntap', 'add', 'dev', device, 'mode', 'tun'));
    const b = await startMeshNode(ns, join(dir, `b-${device}`), device, 51845);
    nodes.push(b);
    const reason = await joinAndSettle(b.sock, 'b');
    assert.deepEqual(await wgHead(a.ns, device), a.head, "A's device keeps its key and port");
    assert.equal((await must(inNs(a.ns, 'wg', 'show', device, 'peers'))).trim(), PEER.publicKey, 'and its peer');
    assert.match(reason ?? '', refusal(device));
  });
});
