/**
 * The mesh end to end (issue 21; docs/feos/fleet.md, "The mesh"), as root: a real `kube32-cli
 * control-plane --feos-listen` on the host and two real feosd without --pod-prefix, each in a network
 * namespace of its own (a veth pair to the host for the control plane, and one veth pair between the two
 * namespaces as the nodes' own network, their --mesh-address), each with its wireguard-go device (distinct
 * --mesh-device names: the UAPI sockets' folder is the machine's). What an operator checks: each node's
 * `feosctl --node NAME mesh get` through the cluster (the /64 the control plane chose, its /96, the other node as its peer), `wg show` in the
 * namespaces, the ConfigMap kube-system/feos-mesh, IPv6 between addresses of the two /96s through the
 * devices, a ULA source sent over the nodes' own link dropped as spoofed, a restart of the control plane and of a feosd keeping the /64, the key and the /96, and a
 * deleted node leaving the other's peers. No microVM boots: pods with security groups across the mesh are
 * test/root/feos-network/mesh-node.test.ts's.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { tempDir } from '../../feos/harness.ts';
import { createToken, type FleetNode, feosctlNode, freePort, keepLog, kubectl, must, Nets, run, startControlPlane, startNode, until } from './helpers.ts';

const CP_NAME = 'feos-cp.test';
const PROBE = join(import.meta.dirname, '../feos-network/probe.ts');
/** A TCP echo on [ADDRESS]:8080 that says when it listens. */
const ECHO = "const s = require('node:net').createServer((c) => { c.on('error', () => {}); c.pipe(c); }); s.listen({ host: process.argv[1], port: 8080 }, () => console.log('listening'));";

/** The mesh as GetMesh answers it (protobuf JSON: camelCase, uint64 as strings, empty fields left out). */
interface MeshJson {
  clusterPrefix?: string;
  nodePrefix?: string;
  publicKey?: string;
  listenPort?: number;
  endpoint?: string;
  version?: string;
  implementation?: string;
  device?: string;
  peers?: { nodeName: string; publicKey: string; endpoint: string; prefix: string }[];
}

/** `feosctl --kubeconfig K --node NAME mesh get -o json`: through the cluster to the node's GetMesh. @throws Error with its stderr when it fails */
async function meshGet(kubeconfig: string, node: FleetNode): Promise<MeshJson> {
  const r = await feosctlNode(kubeconfig, node.name, 'mesh', 'get', '-o', 'json');
  if (r.code !== 0) throw new Error(`feosctl --node ${node.name} mesh get: exit ${r.code}: ${r.stderr}`);
  return (JSON.parse(r.stdout) as { mesh?: MeshJson }).mesh ?? {};
}

/** `wg show DEVICE dump` in the node's namespace: its peers (key, endpoint, allowed IPs, latest handshake). */
async function wgPeers(node: FleetNode, device: string): Promise<{ publicKey: string; endpoint: string; allowedIps: string; handshake: number }[]> {
  const lines = (await must('ip', ['netns', 'exec', node.net.ns, 'wg', 'show', device, 'dump'])).trim().split('\n');
  return lines.slice(1).map((l) => {
    const f = l.split('\t');
    return { publicKey: f[0]!, endpoint: f[2]!, allowedIps: f[3]!, handshake: Number(f[4]) };
  });
}

/** The address `…:ffff:1` of a /96 ("fd12:3456:789a:1:0:1::/96" → "fd12:3456:789a:1:0:1:ffff:1"), as RFC 5952 writes it. */
function hostOf(prefix: string): string {
  const net = prefix.split('/')[0]!;
  const [head, tail] = net.split('::') as [string, string | undefined];
  const h = head ? head.split(':') : [];
  const tl = tail ? tail.split(':') : [];
  const g = [...h, ...new Array<string>(8 - h.length - tl.length).fill('0'), ...tl];
  g[6] = 'ffff';
  g[7] = '1';
  return new URL(`http://[${g.join(':')}]/`).hostname.slice(1, -1);
}

test('two feosd in namespaces on the mesh of their control plane: /96s, peers, IPv6 through wireguard-go, restarts, a removal', { timeout: 900_000 }, async (t) => {
  assert.equal(process.getuid?.(), 0, 'this suite runs as root');
  const nets = new Nets();
  const { dir, cleanup } = tempDir('k32t-fleet-mesh-');
  const nodes: FleetNode[] = [];
  const tag = randomInt(0, 0xffffff).toString(16).padStart(6, '0');
  const device = { a: `wg${tag}a`, b: `wg${tag}b` };
  t.after(async () => {
    for (const n of nodes) keepLog(`mesh-${n.name}`, n.proc.stderr());
    for (const n of nodes) await n.proc.stop('SIGKILL');
    await nets.removeAll();
    for (const d of Object.values(device)) rmSync(`/var/run/wireguard/${d}.sock`, { force: true });
    cleanup();
  });
  const netA = await nets.add('a');
  const netB = await nets.add('b');
  // The nodes' own network: one veth pair between the namespaces.
  const ul = `10.${randomInt(100, 250)}.${randomInt(0, 250)}`;
  const ulIf = `k32m${tag}`;
  await must('ip', ['netns', 'exec', netA.ns, 'ip', 'link', 'add', ulIf, 'type', 'veth', 'peer', 'name', ulIf, 'netns', netB.ns]);
  for (const [net, addr] of [
    [netA, `${ul}.1`],
    [netB, `${ul}.2`],
  ] as const) {
    await must('ip', ['netns', 'exec', net.ns, 'ip', 'addr', 'add', `${addr}/24`, 'dev', ulIf]);
    await must('ip', ['netns', 'exec', net.ns, 'ip', 'link', 'set', ulIf, 'up']);
  }
  const port = await freePort();
  const cpArgs = ['--feos-listen', `0.0.0.0:${port}`, '--feos-advertise-address', `${netA.host}:${port}`, '--feos-server-name', CP_NAME];
  let cp = await startControlPlane(t, cpArgs);
  const first = cp;
  t.after(() => keepLog('mesh-control-plane', first.logs()));
  const token = await createToken(cp.kubeconfig, '--ttl', '1h');
  const meshFlags = (n: 'a' | 'b') => ['--mesh-device', device[n], '--mesh-port', '51820', '--mesh-address', `${ul}.${n === 'a' ? 1 : 2}`];
  const a = await startNode(join(dir, 'a'), 'mesh-a', netA, port, CP_NAME, token, meshFlags('a'));
  nodes.push(a);
  const b = await startNode(join(dir, 'b'), 'mesh-b', netB, port, CP_NAME, token, meshFlags('b'));
  nodes.push(b);

  // --- their /96s of the cluster's /64, and each the other as its peer
  const meshOf = async (n: FleetNode, other: string) =>
    until(`${n.name} has its /96 and ${other} as its peer`, async () => {
      const m = await meshGet(cp.kubeconfig, n);
      return m.nodePrefix && m.peers?.length === 1 && m.peers[0]!.nodeName === other ? m : undefined;
    }, 120_000);
  const ma = await meshOf(a, 'mesh-b');
  const mb = await meshOf(b, 'mesh-a');
  assert.match(ma.clusterPrefix ?? '', /^fd[0-9a-f]{2}:[0-9a-f:]+\/64$/);
  assert.equal(mb.clusterPrefix, ma.clusterPrefix, 'one /64');
  assert.notEqual(ma.nodePrefix, mb.nodePrefix);
  assert.equal(ma.implementation, 'wireguard-go');
  assert.equal(ma.device, device.a);
  assert.deepEqual([ma.peers![0]!.publicKey, ma.peers![0]!.endpoint, ma.peers![0]!.prefix], [mb.publicKey, `${ul}.2:51820`, mb.nodePrefix]);
  assert.deepEqual([mb.peers![0]!.publicKey, mb.peers![0]!.endpoint, mb.peers![0]!.prefix], [ma.publicKey, `${ul}.1:51820`, ma.nodePrefix]);
  // The table an operator reads.
  const table = await feosctlNode(cp.kubeconfig, a.name, 'mesh', 'get');
  assert.equal(table.code, 0, table.stderr);
  assert.ok(table.stdout.includes(ma.nodePrefix!) && table.stdout.includes('mesh-b') && table.stdout.includes(mb.nodePrefix!), table.stdout);
  assert.equal(ma.version, mb.version, "the peers' version is the record's, on both");
  const cm = JSON.parse((await kubectl(cp.kubeconfig, '-n', 'kube-system', 'get', 'configmap', 'feos-mesh', '-o', 'json')).stdout) as { data: Record<string, string> };
  assert.equal(cm.data['cluster-prefix'], ma.clusterPrefix);
  const recorded = JSON.parse(cm.data.nodes!) as Record<string, { prefix: string; publicKey: string }>;
  assert.deepEqual(recorded['mesh-a'] && [recorded['mesh-a'].prefix, recorded['mesh-a'].publicKey], [ma.nodePrefix, ma.publicKey]);
  // The devices: the other's key, endpoint and /96 as its one allowed prefix.
  for (const [n, d, want] of [
    [a, device.a, [mb.publicKey, `${ul}.2:51820`, mb.nodePrefix]],
    [b, device.b, [ma.publicKey, `${ul}.1:51820`, ma.nodePrefix]],
  ] as const) {
    await until(`${n.name}'s device ${d} has its peer`, async () => JSON.stringify((await wgPeers(n, d)).map((p) => [p.publicKey, p.endpoint, p.allowedIps])) === JSON.stringify([want]), 20_000);
  }

  // --- IPv6 between the two /96s, through the devices: an address of each node's /96 on its loopback
  const addrA = hostOf(ma.nodePrefix!);
  const addrB = hostOf(mb.nodePrefix!);
  await must('ip', ['netns', 'exec', a.net.ns, 'ip', '-6', 'addr', 'add', `${addrA}/128`, 'dev', 'lo']);
  await must('ip', ['netns', 'exec', b.net.ns, 'ip', '-6', 'addr', 'add', `${addrB}/128`, 'dev', 'lo']);
  // An echo on port 8080 of each address, and a TCP probe from the other (test/root/feos-network/probe.ts).
  for (const [n, addr] of [
    [a, addrA],
    [b, addrB],
  ] as const) {
    const echo = spawn('ip', ['netns', 'exec', n.net.ns, process.execPath, '-e', ECHO, addr], { stdio: ['ignore', 'pipe', 'inherit'] });
    t.after(() => {
      echo.kill('SIGKILL');
    });
    await new Promise<void>((resolve, reject) => {
      echo.stdout!.once('data', () => resolve());
      echo.once('exit', (c) => reject(new Error(`the echo on ${addr} exited ${c}`)));
    });
  }
  const probe = (from: FleetNode, src: string, dst: string) => run('ip', ['netns', 'exec', from.net.ns, process.execPath, PROBE, dst, '8080', '2000', src], 10_000);
  await until(`${addrA} reaches ${addrB} through the mesh`, async () => (await probe(a, addrA, addrB)).code === 0, 30_000);
  assert.ok((await wgPeers(a, device.a))[0]!.handshake > 0, 'the devices shook hands');
  assert.equal((await probe(b, addrB, addrA)).code, 0, 'and back');

  // --- a ULA source through another device than the one it is routed to is dropped: b sends to a over
  // the nodes' own link instead of the mesh, and a's prerouting drops it as spoofed.
  const spoofDrops = async () => {
    const chain = await must('ip', ['netns', 'exec', a.net.ns, 'nft', 'list', 'chain', 'inet', 'feos', 'prerouting']);
    const cluster = ma.clusterPrefix!.replace(/[.:/]/g, (c) => `\\${c}`);
    const m = new RegExp(`ip6 saddr ${cluster} fib saddr \\. iif oif missing .*counter packets (\\d+)`).exec(chain);
    assert.ok(m, `the mesh's spoof rule in a's prerouting: ${chain}`);
    return Number(m[1]);
  };
  const [aLink] = JSON.parse(await must('ip', ['netns', 'exec', a.net.ns, 'ip', '-j', '-6', 'addr', 'show', 'dev', ulIf, 'scope', 'link'])) as { addr_info: { local: string }[] }[];
  const aLinkLocal = aLink!.addr_info[0]!.local;
  const dropsBefore = await spoofDrops();
  await must('ip', ['netns', 'exec', b.net.ns, 'ip', '-6', 'route', 'add', `${addrA}/128`, 'via', aLinkLocal, 'dev', ulIf]);
  assert.notEqual((await probe(b, addrB, addrA)).code, 0, "b → a over the nodes' link: dropped");
  assert.ok((await spoofDrops()) > dropsBefore, 'by a, as spoofed');
  await must('ip', ['netns', 'exec', b.net.ns, 'ip', '-6', 'route', 'del', `${addrA}/128`, 'via', aLinkLocal, 'dev', ulIf]);
  assert.equal((await probe(b, addrB, addrA)).code, 0, 'b → a through the mesh again');

  // --- the control plane restarted on its data dir: the same /64 and /96s; the peers put whole again
  await cp.stop();
  cp = await startControlPlane(t, cpArgs, first.dataDir);
  t.after(() => keepLog('mesh-control-plane-2', cp.logs()));
  // --- feosd a restarted: the same key and /96, its peer kept
  await a.proc.stop('SIGTERM');
  await a.restart();
  const again = await meshOf(a, 'mesh-b');
  assert.deepEqual([again.clusterPrefix, again.nodePrefix, again.publicKey], [ma.clusterPrefix, ma.nodePrefix, ma.publicKey], 'the same /64, /96 and key');
  await until('the restarted control plane answers JoinMesh and holds node connections again', async () => {
    const r = await kubectl(cp.kubeconfig, 'get', 'node', 'mesh-a', '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")].status}');
    return r.stdout === 'True';
  }, 90_000);
  const cm2 = JSON.parse((await kubectl(cp.kubeconfig, '-n', 'kube-system', 'get', 'configmap', 'feos-mesh', '-o', 'json')).stdout) as { data: Record<string, string> };
  assert.equal(cm2.data['cluster-prefix'], ma.clusterPrefix);
  await must('ip', ['netns', 'exec', a.net.ns, 'ip', '-6', 'addr', 'replace', `${addrA}/128`, 'dev', 'lo']);
  await until(`${addrA} reaches ${addrB} after the restarts`, async () => (await probe(a, addrA, addrB)).code === 0, 30_000);

  // --- kubectl delete node mesh-b: it leaves a's peers and device; its /96 is freed
  const del = await kubectl(cp.kubeconfig, 'delete', 'node', 'mesh-b');
  assert.equal(del.code, 0, del.stderr);
  await until("mesh-b leaves mesh-a's peers", async () => ((await meshGet(cp.kubeconfig, a)).peers ?? []).length === 0, 60_000);
  assert.deepEqual(await wgPeers(a, device.a), [], "and a's device");
  await until('the record no longer holds mesh-b', async () => {
    const r = JSON.parse((await kubectl(cp.kubeconfig, '-n', 'kube-system', 'get', 'configmap', 'feos-mesh', '-o', 'json')).stdout) as { data: Record<string, string> };
    return !Object.hasOwn(JSON.parse(r.data.nodes!) as object, 'mesh-b');
  }, 30_000);
  assert.notEqual((await probe(a, addrA, addrB)).code, 0, 'no way to its /96 any more');
});
