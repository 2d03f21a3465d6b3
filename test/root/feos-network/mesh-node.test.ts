// The mesh, the node's side (seed: "The mesh"; issue 21): two nodes' network layers in two network
// namespaces joined by a veth pair, each with its own wireguard-go device (distinct names: the UAPI
// socket's folder is the machine's), given their /96s as JoinMesh's answer and their peers by hand over
// feos.network.v1.MeshService (a gRPC client from our protos). Veth "pods" on both reach each other
// over IPv6 through the mesh where their security groups allow it. No traffic leaves the namespaces.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import {
  type GetMeshResponse,
  MeshService,
  Protocol,
  type PutMeshPeersResponse,
  SecurityGroupRuleSchema,
  SecurityGroupSchema,
  type SecurityGroupRule,
  SecurityGroupService,
  type UpdateMeshPeersResponse,
} from '../../../src/feos/gen/feos/network/v1/network_pb.js';
import { type AttachedPod, type PodAddresses, publicKeyOf } from '../../../src/feos/network/index.ts';
import { waitFor } from '../../helpers/wait.ts';
import { Namespaces, control, grpcClient, inNs, must, sh, startInNs, type Started } from './helpers.ts';

const here = import.meta.dirname;
const NODE_FIXTURE = join(here, 'fixture-node.ts');
const ECHO_FIXTURE = join(here, 'fixture-internet.ts');
const PROBE = join(here, 'probe.ts');
const FEOSCTL = join(here, '../../../bin/feosctl.js');
const CLUSTER = 'fd12:3456:789a:1::/64';
const PREFIX = { a: 'fd12:3456:789a:1:0:1::/96', b: 'fd12:3456:789a:1:0:2::/96' } as const;
const UNDERLAY = { a: '10.9.0.1', b: '10.9.0.2' } as const;
const PORT = { a: 51821, b: 51822 } as const;
const ids = { a: 'mabcdefghjk', b: 'mbcdefghjkm', c: 'mcdefghjkmn' } as const;
const REACHES_MS = 10_000;

type Node = 'a' | 'b';

describe('the mesh between two nodes in namespaces', { timeout: 300_000 }, () => {
  const nss = new Namespaces();
  // Distinct device names: wireguard-go's UAPI sockets are in /var/run/wireguard whatever the namespace.
  const device = { a: `wg${nss.prefix.slice(5)}a`, b: `wg${nss.prefix.slice(5)}b` } as const;
  let dir = '';
  const nodeNs = { a: '', b: '' };
  const podNs: Record<string, string> = {};
  const nodes: Partial<Record<Node, Started>> = {};
  const addrs: Record<string, PodAddresses> = {};
  const keys = { a: '', b: '' };
  const sock = (n: Node, name: string) => join(dir, n, name);
  const ctl = (n: Node, call: Record<string, unknown>) => control(sock(n, 'control.sock'), call);
  const meshCall = async <T>(n: Node, method: string, req: unknown): Promise<T> => {
    const c = grpcClient(MeshService, sock(n, 'grpc.sock'));
    try {
      return await c.call<T>(method, req);
    } finally {
      c.close();
    }
  };
  const probe = (pod: string, host: string, port: number, timeoutMs = 1_500) => sh(inNs(podNs[pod], process.execPath, PROBE, host, String(port), String(timeoutMs)));
  const podOf = { a: 'a', c: 'a', b: 'b' } as Record<string, Node>;

  async function startNode(n: Node): Promise<{ unavailable: string | null }> {
    const flags = {
      dnsUpstreams: [UNDERLAY[n === 'a' ? 'b' : 'a']],
      rulesIntervalMs: 3_600_000,
      trafficRecords: false,
      mesh: { nodeDir: join(dir, n, 'node'), device: device[n], port: PORT[n], implementation: 'wireguard-go' },
    };
    nodes[n] = await startInNs(nodeNs[n], NODE_FIXTURE, [
      JSON.stringify({ stateDir: join(dir, n, 'state'), grpcSocket: sock(n, 'grpc.sock'), controlSocket: sock(n, 'control.sock'), flags, kept: [] }),
    ]);
    return JSON.parse(nodes[n].ready);
  }

  const wgDump = async (n: Node) => {
    const lines = (await must(inNs(nodeNs[n], 'wg', 'show', device[n], 'dump'))).trim().split('\n');
    return lines.slice(1).map((l) => {
      const f = l.split('\t');
      return { publicKey: f[0], endpoint: f[2], allowedIps: f[3], lastHandshake: Number(f[4]) };
    });
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'k32t-mesh-'));
    for (const n of ['a', 'b'] as const) {
      nodeNs[n] = await nss.add(`node${n}`);
      await must(['mkdir', '-p', join(dir, n)]);
    }
    for (const p of ['a', 'b', 'c']) podNs[p] = await nss.add(`pod${p}`);
    // The underlay: one veth pair between the nodes, as their own network.
    await must(inNs(nodeNs.a, 'ip', 'link', 'add', 'ul0', 'type', 'veth', 'peer', 'name', 'ul0', 'netns', nodeNs.b));
    for (const n of ['a', 'b'] as const) {
      const other = n === 'a' ? 'b' : 'a';
      await must(inNs(nodeNs[n], 'ip', 'addr', 'add', `${UNDERLAY[n]}/24`, 'dev', 'ul0'));
      await must(inNs(nodeNs[n], 'ip', '-6', 'addr', 'add', `2600:9::${n === 'a' ? 1 : 2}/64`, 'dev', 'ul0', 'nodad'));
      await must(inNs(nodeNs[n], 'ip', 'link', 'set', 'ul0', 'up'));
      await must(inNs(nodeNs[n], 'ip', 'route', 'add', 'default', 'via', UNDERLAY[other]));
      await must(inNs(nodeNs[n], 'ip', '-6', 'route', 'add', 'default', 'via', `2600:9::${other === 'a' ? 1 : 2}`));
    }
    for (const n of ['a', 'b'] as const) {
      const r = await startNode(n);
      assert.match(r.unavailable ?? '', /no \/96 of its cluster's mesh yet/, 'no network before the /96');
    }
  });

  after(async () => {
    for (const n of ['a', 'b'] as const) await nodes[n]?.stop();
    // wireguard-go runs on as a daemon of its own: the namespaces' removal ends it first (a deleted namespace would keep it).
    await nss.removeAll();
    for (const n of ['a', 'b'] as const) await rm(`/var/run/wireguard/${device[n]}.sock`, { force: true });
    await rm(dir, { recursive: true, force: true });
  });

  it('refuses peers before the node has a /96', async () => {
    await assert.rejects(meshCall('a', 'PutMeshPeers', { version: 1n, peers: [] }), (e: { code: number; details: string }) => e.code === 9 && /no mesh yet/.test(e.details));
  });

  it('takes its /96 from the JoinMesh answer: the device, the key (0600), the routes, the network up', async () => {
    for (const n of ['a', 'b'] as const) {
      const r = await ctl(n, { method: 'joinMesh', localAddress: UNDERLAY[n], answer: { meshed: true, clusterPrefix: CLUSTER, nodePrefix: PREFIX[n] } });
      assert.ok(r.ok, r.message ?? '');
      const { ask, taken } = r.result as { ask: { publicKey: string; endpoint: string }; taken: boolean };
      assert.equal(taken, true);
      assert.equal(ask.endpoint, `${UNDERLAY[n]}:${PORT[n]}`);
      assert.match(ask.publicKey, /^[A-Za-z0-9+/]{43}=$/);
      keys[n] = ask.publicKey;
      await waitFor(`node ${n}'s network up`, 30_000, async () => (await ctl(n, { method: 'unavailableReason' })).result === null);
      assert.equal((await stat(join(dir, n, 'node', 'mesh', 'key'))).mode & 0o777, 0o600);
      assert.equal((await stat(join(dir, n, 'node', 'mesh', 'mesh.pb'))).mode & 0o777, 0o600);
      const routes = JSON.parse(await must(inNs(nodeNs[n], 'ip', '-j', '-6', 'route', 'show'))) as Array<{ dst: string; dev?: string; type?: string }>;
      assert.ok(routes.some((x) => x.dst === CLUSTER && x.dev === device[n]), `the ULA to the device: ${JSON.stringify(routes)}`);
      assert.ok(routes.some((x) => x.dst === PREFIX[n] && x.type === 'unreachable'), 'the /96 unreachable but for its pods');
      const [link] = JSON.parse(await must(inNs(nodeNs[n], 'ip', '-j', 'link', 'show', 'dev', device[n]))) as Array<{ mtu: number }>;
      assert.equal(link.mtu, 1420);
      const mesh = (await meshCall<GetMeshResponse>(n, 'GetMesh', {})).mesh!;
      assert.equal(mesh.nodePrefix, PREFIX[n]);
      assert.equal(mesh.clusterPrefix, CLUSTER);
      assert.equal(mesh.publicKey, keys[n]);
      assert.equal(mesh.listenPort, PORT[n]);
      assert.equal(mesh.implementation, 'wireguard-go');
      assert.equal(mesh.device, device[n]);
      // wg agrees on the key and the port.
      const [head] = (await must(inNs(nodeNs[n], 'wg', 'show', device[n], 'dump'))).split('\n');
      assert.equal(head.split('\t')[1], keys[n]);
      assert.equal(head.split('\t')[2], String(PORT[n]));
    }
  });

  it('takes peers whole over MeshService, refusing bad ones, and gives them to the device', async () => {
    const peer = (n: Node) => ({ nodeName: `node-${n}`, publicKey: keys[n], endpoint: `${UNDERLAY[n]}:${PORT[n]}`, prefix: PREFIX[n] });
    await assert.rejects(
      meshCall('a', 'PutMeshPeers', { version: 1n, peers: [{ ...peer('b'), prefix: 'fd00:1::/96' }] }),
      (e: { code: number; details: string }) => e.code === 3 && /not a \/96 of the cluster's ULA/.test(e.details),
    );
    await assert.rejects(meshCall('a', 'PutMeshPeers', { version: 1n, peers: [peer('b'), peer('b')] }), (e: { code: number }) => e.code === 3);
    await assert.rejects(meshCall('a', 'PutMeshPeers', { version: 1n, peers: [{ ...peer('b'), endpoint: 'node-b' }] }), (e: { code: number }) => e.code === 3);
    const ra = await meshCall<PutMeshPeersResponse>('a', 'PutMeshPeers', { version: 1n, peers: [peer('b')] });
    assert.equal(ra.mesh!.version, 1n);
    await meshCall<PutMeshPeersResponse>('b', 'PutMeshPeers', { version: 1n, peers: [peer('a')] });
    for (const [n, other] of [
      ['a', 'b'],
      ['b', 'a'],
    ] as const) {
      const peers = await wgDump(n);
      assert.deepEqual(
        peers.map((p) => [p.publicKey, p.endpoint, p.allowedIps]),
        [[keys[other], `${UNDERLAY[other]}:${PORT[other]}`, PREFIX[other]]],
      );
    }
    // The peers' endpoints are denied to pods.
    await waitFor("node a's deny4 holds b's endpoint", 10_000, async () => /10\.9\.0\.2/.test(await must(inNs(nodeNs.a, 'nft', 'list', 'set', 'inet', 'feos', 'deny4'))));
  });

  it("lets a pod on node a reach one on node b through the mesh where their groups allow it, and not where they do not", async () => {
    const rule = (protocol: Protocol, peer: SecurityGroupRule['peer'], ports: Array<{ first: number; last?: number }> = []) => create(SecurityGroupRuleSchema, { protocol, peer, ports });
    const specs = {
      a: { securityGroups: ['web'], nameTables: [], dnsUpstreams: [] },
      b: { securityGroups: ['web'], nameTables: [], dnsUpstreams: [] },
      c: { securityGroups: ['client'], nameTables: [], dnsUpstreams: [] },
    };
    for (const p of ['a', 'b', 'c'] as const) {
      const r = await ctl(podOf[p], { method: 'createPod', id: ids[p], spec: specs[p] });
      assert.ok(r.ok, r.message ?? '');
      addrs[p] = r.result as PodAddresses;
    }
    assert.ok(addrs.a.ipv6!.startsWith('fd12:3456:789a:1:0:1:'), `a's address in a's /96: ${addrs.a.ipv6}`);
    assert.ok(addrs.b.ipv6!.startsWith('fd12:3456:789a:1:0:2:'), `b's address in b's /96: ${addrs.b.ipv6}`);
    // The control plane would send the groups with their members across nodes; here by hand.
    for (const n of ['a', 'b'] as const) {
      const sg = grpcClient(SecurityGroupService, sock(n, 'grpc.sock'));
      try {
        await sg.call('PutSecurityGroup', {
          group: create(SecurityGroupSchema, {
            id: 'web',
            version: 1n,
            members: [addrs.a.ipv6!, addrs.b.ipv6!],
            ingress: [rule(Protocol.TCP, { case: 'group', value: 'web' }, [{ first: 8080 }])],
            egress: [rule(Protocol.UNSPECIFIED, { case: 'group', value: 'web' })],
          }),
        });
        await sg.call('PutSecurityGroup', {
          group: create(SecurityGroupSchema, { id: 'client', version: 1n, members: [addrs.c.ipv6!], egress: [rule(Protocol.TCP, { case: 'group', value: 'web' })] }),
        });
      } finally {
        sg.close();
      }
    }
    for (const p of ['a', 'b', 'c'] as const) {
      const n = podOf[p];
      const tap = `pod-${ids[p]}`;
      await must(inNs(nodeNs[n], 'ip', 'link', 'add', tap, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', podNs[p]));
      const r = await ctl(n, { method: 'attachPod', id: ids[p] });
      assert.ok(r.ok, r.message ?? '');
      const at = r.result as AttachedPod;
      // A ULA pod: fc00::/7 via fe80::1 with the mesh's MTU instead of a default route.
      assert.deepEqual(at.guest.ipv6Routes, ['fc00::/7']);
      assert.equal(at.guest.mtu, 1420);
      const ns = podNs[p];
      await must(inNs(ns, 'ip', 'link', 'set', 'eth0', 'address', at.mac, 'mtu', String(at.guest.mtu)));
      await must(inNs(ns, 'ip', 'link', 'set', 'eth0', 'up'));
      await must(inNs(ns, 'ip', '-6', 'addr', 'add', `${at.guest.ipv6Address}/128`, 'dev', 'eth0', 'nodad'));
      for (const route of at.guest.ipv6Routes) await must(inNs(ns, 'ip', '-6', 'route', 'add', route, 'via', at.guest.ipv6Gateway, 'dev', 'eth0', 'mtu', String(at.guest.mtu)));
    }
    const echoB = await startInNs(podNs.b, ECHO_FIXTURE, ['::']);
    try {
      assert.equal((await probe('a', addrs.b.ipv6!, 8080, REACHES_MS)).stdout.trim(), 'ok', 'web on a → web on b, TCP 8080, through the mesh');
      assert.equal((await probe('c', addrs.b.ipv6!, 8080)).code, 1, 'client on a → web on b: b takes nothing from client');
      assert.equal((await probe('a', addrs.b.ipv6!, 8081)).code, 1, 'web → web on a port the group does not open');
    } finally {
      await echoB.stop();
    }
    const [toB] = await wgDump('a');
    assert.ok(toB.lastHandshake > 0, 'the devices shook hands');
  });

  it('drops a ULA source that comes through another device than the one it is routed to', async () => {
    const echoA = await startInNs(podNs.a, ECHO_FIXTURE, ['::']);
    const spoofed = async () => {
      const pre = await must(inNs(nodeNs.a, 'nft', 'list', 'chain', 'inet', 'feos', 'prerouting'));
      const m = new RegExp(`ip6 saddr ${CLUSTER.replace(/[.:/]/g, (c) => `\\${c}`)} fib saddr \\. iif oif missing .*counter packets (\\d+)`).exec(pre);
      assert.ok(m, `the mesh's spoof rule: ${pre}`);
      return Number(m[1]);
    };
    try {
      assert.equal((await probe('b', addrs.a.ipv6!, 8080, REACHES_MS)).stdout.trim(), 'ok', 'b → a through the mesh');
      const before = await spoofed();
      // b's node sends b's packets to a over the underlay instead: their source, in the ULA, comes in through ul0.
      await must(inNs(nodeNs.b, 'ip', '-6', 'route', 'add', `${addrs.a.ipv6}/128`, 'via', '2600:9::1', 'dev', 'ul0'));
      try {
        assert.equal((await probe('b', addrs.a.ipv6!, 8080)).code, 1, 'b → a over the underlay: dropped');
        assert.ok((await spoofed()) > before, 'dropped by node a as spoofed');
      } finally {
        await must(inNs(nodeNs.b, 'ip', '-6', 'route', 'del', `${addrs.a.ipv6}/128`, 'via', '2600:9::1', 'dev', 'ul0'));
      }
      assert.equal((await probe('b', addrs.a.ipv6!, 8080, REACHES_MS)).stdout.trim(), 'ok', 'b → a through the mesh again');
    } finally {
      await echoA.stop();
    }
  });

  it('applies deltas only from its version, and a removed peer leaves the device', async () => {
    await assert.rejects(
      meshCall('a', 'UpdateMeshPeers', { fromVersion: 7n, toVersion: 8n, put: [], remove: ['node-b'] }),
      (e: { code: number; details: string }) => e.code === 9 && /version 1, not 7/.test(e.details),
    );
    // A new peer: b, which stays, keeps its session (its handshake), and the new one is set.
    const [b1] = await wgDump('a');
    assert.ok(b1.lastHandshake > 0);
    const keyC = publicKeyOf(Buffer.alloc(32, 11).toString('base64'));
    await meshCall('a', 'UpdateMeshPeers', {
      fromVersion: 1n,
      toVersion: 2n,
      put: [{ nodeName: 'node-c', publicKey: keyC, endpoint: '10.9.0.3:51820', prefix: 'fd12:3456:789a:1:0:3::/96' }],
      remove: [],
    });
    const after = await wgDump('a');
    assert.deepEqual(after.map((p) => p.publicKey).sort(), [keys.b, keyC].sort());
    assert.equal(after.find((p) => p.publicKey === keys.b)!.lastHandshake, b1.lastHandshake, 'the peer that stays keeps its session');
    const r = await meshCall<UpdateMeshPeersResponse>('a', 'UpdateMeshPeers', { fromVersion: 2n, toVersion: 3n, put: [], remove: ['node-b', 'node-c'] });
    assert.equal(r.mesh!.version, 3n);
    assert.deepEqual(r.mesh!.peers, []);
    assert.deepEqual(await wgDump('a'), []);
    assert.equal((await probe('a', addrs.b.ipv6!, 8080)).code, 1, 'no way to b without its peer');
    // Back, as a delta: the peer is set again.
    await meshCall('a', 'UpdateMeshPeers', {
      fromVersion: 3n,
      toVersion: 4n,
      put: [{ nodeName: 'node-b', publicKey: keys.b, endpoint: `${UNDERLAY.b}:${PORT.b}`, prefix: PREFIX.b }],
      remove: [],
    });
    assert.deepEqual((await wgDump('a')).map((p) => p.publicKey), [keys.b]);
  });

  it('keeps the key, the prefix and the peers across a restart', async () => {
    await nodes.a!.stop();
    const r = await startNode('a');
    assert.equal(r.unavailable, null, 'the kept /96 brings the network up at once');
    const mesh = (await meshCall<GetMeshResponse>('a', 'GetMesh', {})).mesh!;
    assert.equal(mesh.publicKey, keys.a);
    assert.equal(mesh.nodePrefix, PREFIX.a);
    assert.equal(mesh.version, 4n);
    assert.deepEqual(mesh.peers.map((p) => p.nodeName), ['node-b']);
    assert.deepEqual((await wgDump('a')).map((p) => [p.publicKey, p.allowedIps]), [[keys.b, PREFIX.b]]);
    // What a user reads with feosctl.
    const json = JSON.parse(await must([process.execPath, FEOSCTL, '--socket', sock('a', 'grpc.sock'), 'mesh', 'get', '-o', 'json'])) as { mesh: Record<string, unknown> };
    assert.equal(json.mesh.nodePrefix, PREFIX.a);
    assert.equal(json.mesh.version, '4');
    assert.equal(json.mesh.implementation, 'wireguard-go');
    const text = await must([process.execPath, FEOSCTL, '--socket', sock('a', 'grpc.sock'), 'mesh', 'get']);
    assert.match(text, new RegExp(`${device.a}\\s+wireguard-go\\s+${PORT.a}\\s+${CLUSTER}\\s+${PREFIX.a}\\s+4\\s+`));
    assert.match(text, new RegExp(`node-b\\s+${PREFIX.b}\\s+${UNDERLAY.b}:${PORT.b}`));
    const { result } = await ctl('a', { method: 'joinMesh', localAddress: UNDERLAY.a, answer: { meshed: true, clusterPrefix: CLUSTER, nodePrefix: PREFIX.a } });
    assert.equal((result as { ask: { publicKey: string } }).ask.publicKey, keys.a, 'the same key asked for again');
  });
});
