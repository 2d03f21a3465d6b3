// The pods' network in network namespaces (seed: "The pods' network" and after): a node, three
// veth "pods" and a fake internet, each a namespace this suite makes and removes. No traffic
// leaves them.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import {
  NameService,
  NameTableSchema,
  Protocol,
  SecurityGroupRuleSchema,
  SecurityGroupSchema,
  type SecurityGroupRule,
  SecurityGroupService,
  TrafficService,
  type WatchTrafficResponse,
} from '../../../src/feos/gen/feos/network/v1/network_pb.js';
import type { AttachedPod, PodAddresses, PodNetworkSpec } from '../../../src/feos/network/index.ts';
import { Namespaces, control, grpcClient, grpcStream, inNs, must, sh, startInNs, type Started } from './helpers.ts';

const here = import.meta.dirname;
const NODE_FIXTURE = join(here, 'fixture-node.ts');
const INET_FIXTURE = join(here, 'fixture-internet.ts');
const PROBE = join(here, 'probe.ts');
const HTTP_PROBE = join(here, 'http-probe.ts');
const PREFIX = '2001:db8:1::/64';
const ids = { a: 'abcdefghjkm', b: 'bcdefghjkmn', c: 'cdefghjkmnp', d: 'defghjkmnpq' } as const;

describe('the pods network in namespaces', { timeout: 240_000 }, () => {
  const nss = new Namespaces();
  let dir = '';
  let nodeNs = '';
  let inetNs = '';
  const podNs: Record<string, string> = {};
  let node: Started | undefined;
  let inet: Started | undefined;
  const addrs: Record<string, PodAddresses> = {};
  const attached: Record<string, AttachedPod> = {};
  const specs: Record<string, PodNetworkSpec> = {
    a: { securityGroups: ['web'], nameTables: ['svc'], dnsUpstreams: [], metadata: { role: 'web' } },
    b: { securityGroups: ['web'], nameTables: [], dnsUpstreams: [] },
    c: { securityGroups: ['client'], nameTables: [], dnsUpstreams: [] },
  };
  const ctl = (call: Record<string, unknown>) => control(join(dir, 'control.sock'), call);
  const sgClient = () => grpcClient(SecurityGroupService, join(dir, 'grpc.sock'));
  const ntClient = () => grpcClient(NameService, join(dir, 'grpc.sock'));
  // A probe that must fail waits its timeout out (1.5 s: enough for a drop, which never answers); one that
  // must connect is given REACHES_MS, which only a failure waits out (a loaded machine may be slow).
  const REACHES_MS = 10_000;
  const probe = (pod: string, host: string, port: number, timeoutMs = 1_500, from?: string) =>
    sh(inNs(podNs[pod], process.execPath, PROBE, host, String(port), String(timeoutMs), ...(from ? [from] : [])));
  const nodeFlags = { podPrefix: PREFIX, dnsUpstreams: ['11.0.0.2'], denyPrefixes: ['11.0.0.128/25'], rulesIntervalMs: 3_600_000 };

  async function startNode(kept: unknown[] = []): Promise<{ kept: Record<string, PodAddresses>; unavailable: string | null }> {
    node = await startInNs(nodeNs, NODE_FIXTURE, [
      JSON.stringify({ stateDir: join(dir, 'state'), grpcSocket: join(dir, 'grpc.sock'), controlSocket: join(dir, 'control.sock'), flags: nodeFlags, kept }),
    ]);
    return JSON.parse(node.ready);
  }

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'k32t-net-'));
    nodeNs = await nss.add('node');
    inetNs = await nss.add('inet');
    for (const p of ['a', 'b', 'c']) podNs[p] = await nss.add(p);
    // The node's uplink to the fake internet.
    await must(inNs(nodeNs, 'ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', inetNs));
    for (const [ns, dev, v4, v6] of [
      [nodeNs, 'up0', '11.0.0.1/24', '2600:1::1/64'],
      [inetNs, 'eth0', '11.0.0.2/24', '2600:1::2/64'],
    ]) {
      await must(inNs(ns, 'ip', 'addr', 'add', v4, 'dev', dev));
      await must(inNs(ns, 'ip', '-6', 'addr', 'add', v6, 'dev', dev, 'nodad'));
      await must(inNs(ns, 'ip', 'link', 'set', dev, 'up'));
    }
    await must(inNs(inetNs, 'ip', 'addr', 'add', '11.0.0.200/24', 'dev', 'eth0'));
    await must(inNs(nodeNs, 'ip', 'route', 'add', 'default', 'via', '11.0.0.2'));
    await must(inNs(nodeNs, 'ip', '-6', 'route', 'add', 'default', 'via', '2600:1::2'));
    await must(inNs(inetNs, 'ip', '-6', 'route', 'add', PREFIX, 'via', '2600:1::1'));
    await must(inNs(inetNs, 'ip', 'route', 'add', '169.254.0.53/32', 'via', '11.0.0.1'));
    inet = await startInNs(inetNs, INET_FIXTURE, ['11.0.0.2', '2600:1::2', '11.0.0.200']);
    const r = await startNode();
    assert.equal(r.unavailable, null);
  });

  after(async () => {
    await node?.stop();
    await inet?.stop();
    await nss.removeAll();
    await rm(dir, { recursive: true, force: true });
  });

  it('sets the node up: forwarding, the unreachable prefix, feos-dns', async () => {
    assert.equal((await must(inNs(nodeNs, 'cat', '/proc/sys/net/ipv4/ip_forward'))).trim(), '1');
    assert.equal((await must(inNs(nodeNs, 'cat', '/proc/sys/net/ipv6/conf/all/forwarding'))).trim(), '1');
    const routes = JSON.parse(await must(inNs(nodeNs, 'ip', '-j', '-6', 'route', 'show', 'type', 'unreachable'))) as Array<{ dst: string }>;
    assert.ok(routes.some((r) => r.dst === PREFIX), JSON.stringify(routes));
    const [dns] = JSON.parse(await must(inNs(nodeNs, 'ip', '-j', 'addr', 'show', 'dev', 'feos-dns'))) as Array<{ addr_info: Array<{ local: string; prefixlen: number }> }>;
    assert.deepEqual(dns.addr_info.map((a) => `${a.local}/${a.prefixlen}`).sort(), ['169.254.0.53/32', '169.254.169.1/32']);
  });

  it('hands out addresses and fails a bring-up whose groups and tables are missing, naming them', async () => {
    for (const p of ['a', 'b', 'c'] as const) {
      const r = await ctl({ method: 'createPod', id: ids[p], spec: specs[p] });
      assert.ok(r.ok, r.message ?? '');
      addrs[p] = r.result as PodAddresses;
    }
    assert.deepEqual(addrs.a, { ipv6: '2001:db8:1::2', ipv4: '169.254.16.1' });
    assert.deepEqual(addrs.c, { ipv6: '2001:db8:1::4', ipv4: '169.254.16.3' });
    const r = await ctl({ method: 'attachPod', id: ids.a });
    assert.equal(r.ok, false);
    assert.equal(r.code, 'FAILED_PRECONDITION');
    assert.match(r.message!, /security group web and name table svc not on the node/);
    const bad = await ctl({ method: 'createPod', id: ids.d, spec: { securityGroups: [], nameTables: [], dnsUpstreams: ['127.0.0.1'] } });
    assert.equal(bad.code, 'INVALID_ARGUMENT');
    assert.match(bad.message!, /loopback/);
  });

  it('keeps groups and tables sent over gRPC, and refuses deleting one a pod names', async () => {
    const sg = sgClient();
    const nt = ntClient();
    try {
      const rule = (protocol: Protocol, peer: SecurityGroupRule['peer'], ports: Array<{ first: number; last?: number }> = []) =>
        create(SecurityGroupRuleSchema, { protocol, peer, ports });
      await sg.call('PutSecurityGroup', create(SecurityGroupService.method.putSecurityGroup.input, {
        group: create(SecurityGroupSchema, {
          id: 'web',
          version: 1n,
          ingress: [rule(Protocol.TCP, { case: 'group', value: 'web' }, [{ first: 8080 }]), rule(Protocol.ICMPV6, { case: 'group', value: 'web' })],
          egress: [rule(Protocol.UNSPECIFIED, { case: 'group', value: 'web' }), rule(Protocol.UNSPECIFIED, { case: 'internet', value: true })],
        }),
      }));
      await sg.call('PutSecurityGroup', create(SecurityGroupService.method.putSecurityGroup.input, {
        group: create(SecurityGroupSchema, { id: 'client', version: 1n, egress: [rule(Protocol.TCP, { case: 'group', value: 'web' })] }),
      }));
      await nt.call('PutNameTable', create(NameService.method.putNameTable.input, {
        table: create(NameTableSchema, { id: 'svc', version: 1n, names: [{ name: 'api', addresses: [addrs.b.ipv6!, '127.0.0.1'] }], includes: ['extra', 'absent'] }),
      }));
      await nt.call('PutNameTable', create(NameService.method.putNameTable.input, {
        table: create(NameTableSchema, { id: 'extra', version: 1n, names: [{ name: 'db', addresses: ['2001:db8:1::77'] }, { name: 'api', addresses: ['::1'] }] }),
      }));
      await assert.rejects(sg.call('DeleteSecurityGroup', { id: 'web' }), (err: { code: number; details: string }) => err.code === 9 && /named by pod/.test(err.details));
      await assert.rejects(nt.call('DeleteNameTable', { id: 'svc' }), (err: { code: number }) => err.code === 9);
      await assert.rejects(
        sg.call('PutSecurityGroup', create(SecurityGroupService.method.putSecurityGroup.input, { group: create(SecurityGroupSchema, { id: 'Bad!' }) })),
        (err: { code: number }) => err.code === 3,
      );
      const list = await sg.call<{ groups: Array<{ id: string }> }>('ListSecurityGroups', {});
      assert.deepEqual(list.groups.map((g) => g.id), ['default', 'client', 'web']);
    } finally {
      sg.close();
      nt.close();
    }
  });

  it('gives veth pods their devices, addresses and routes', async () => {
    for (const p of ['a', 'b', 'c'] as const) {
      const ns = podNs[p];
      const tap = `pod-${ids[p]}`;
      await must(inNs(nodeNs, 'ip', 'link', 'add', tap, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns));
      const r = await ctl({ method: 'attachPod', id: ids[p] });
      assert.ok(r.ok, r.message ?? '');
      const at = r.result as AttachedPod;
      attached[p] = at;
      assert.equal(at.tap, tap);
      assert.match(at.mac, /^06:00(:[0-9a-f]{2}){4}$/);
      assert.deepEqual(at.guest.nameservers, ['169.254.0.53']);
      // What the guest agent would do with what it is pushed.
      await must(inNs(ns, 'ip', 'link', 'set', 'eth0', 'address', at.mac));
      await must(inNs(ns, 'ip', 'link', 'set', 'eth0', 'up'));
      await must(inNs(ns, 'ip', '-6', 'addr', 'add', `${at.guest.ipv6Address}/128`, 'dev', 'eth0', 'nodad'));
      await must(inNs(ns, 'ip', '-6', 'route', 'add', 'default', 'via', at.guest.ipv6Gateway, 'dev', 'eth0'));
      await must(inNs(ns, 'ip', 'addr', 'add', `${at.guest.ipv4Address}/32`, 'dev', 'eth0'));
      await must(inNs(ns, 'ip', 'route', 'add', 'default', 'via', at.guest.ipv4Gateway, 'dev', 'eth0', 'onlink'));
    }
    const tap = `pod-${ids.a}`;
    const [link] = JSON.parse(await must(inNs(nodeNs, 'ip', '-j', 'addr', 'show', 'dev', tap))) as Array<{ addr_info: Array<{ family: string; local: string; prefixlen: number }> }>;
    const v4 = link.addr_info.filter((a) => a.family === 'inet').map((a) => `${a.local}/${a.prefixlen}`);
    assert.deepEqual(v4, ['169.254.0.53/32', '169.254.169.1/32'], 'the resolver first, then OTLP');
    assert.deepEqual(link.addr_info.filter((a) => a.family === 'inet6').map((a) => `${a.local}/${a.prefixlen}`), ['fe80::1/64'], 'no kernel link-local');
    for (const [key, want] of [
      [`ipv4/conf/${tap}/arp_ignore`, '1'],
      [`ipv4/conf/${tap}/arp_announce`, '2'],
      [`ipv6/conf/${tap}/accept_ra`, '0'],
      [`ipv6/conf/${tap}/autoconf`, '0'],
      [`ipv4/neigh/${tap}/proxy_delay`, '0'],
    ]) {
      assert.equal((await must(inNs(nodeNs, 'cat', `/proc/sys/net/${key}`))).trim(), want, key);
    }
    const proxies = JSON.parse(await must(inNs(nodeNs, 'ip', '-j', 'neigh', 'show', 'proxy', 'dev', tap))) as Array<{ dst: string }>;
    assert.deepEqual(proxies.map((p) => p.dst), ['169.254.0.1']);
    const r4 = JSON.parse(await must(inNs(nodeNs, 'ip', '-j', 'route', 'show', 'dev', tap))) as Array<{ dst: string }>;
    assert.ok(r4.some((r) => r.dst === addrs.a.ipv4));
    const r6 = JSON.parse(await must(inNs(nodeNs, 'ip', '-j', '-6', 'route', 'show', 'dev', tap))) as Array<{ dst: string }>;
    assert.ok(r6.some((r) => r.dst === addrs.a.ipv6));
    // The gateways answer: the proxy ARP entry and fe80::1.
    assert.equal((await sh(inNs(podNs.a, 'busybox', 'ping', '-c', '1', '-W', '2', '169.254.0.53'))).code, 1, 'the node answers no ping');
    const neigh = JSON.parse(await must(inNs(podNs.a, 'ip', '-j', 'neigh', 'show', 'dev', 'eth0'))) as Array<{ dst: string; lladdr?: string }>;
    assert.ok(neigh.some((n) => n.dst === '169.254.0.1' && n.lladdr), `169.254.0.1 resolved by proxy ARP: ${JSON.stringify(neigh)}`);
  });

  it('writes the seed table inet feos', async () => {
    const list = JSON.parse(await must(inNs(nodeNs, 'nft', '-j', 'list', 'table', 'inet', 'feos'))).nftables as Array<Record<string, { name: string; hook?: string }>>;
    const chains = list.filter((o) => o.chain).map((o) => o.chain.name);
    for (const c of ['prerouting', 'input', 'forward', 'postrouting', 'from-pods', 'to-pods', `out-pod-${ids.a}`, `in-pod-${ids.a}`]) assert.ok(chains.includes(c), c);
    const sets = list.filter((o) => o.set).map((o) => o.set.name);
    for (const s of ['deny4', 'deny6', 'internet4', 'internet6', 'g-web']) assert.ok(sets.includes(s), s);
    const maps = list.filter((o) => o.map).map((o) => o.map.name);
    assert.deepEqual(maps.sort(), ['pod-in', 'pod-out']);
    const text = await must(inNs(nodeNs, 'nft', 'list', 'table', 'inet', 'feos'));
    assert.match(text, /ip saddr 169\.254\.16\.0\/20 oifname != "pod-\*" masquerade/);
    assert.match(text, /fib saddr \. iif oif missing/);
    assert.match(text, /ct original packets < 5 meta l4proto tcp log group 3/);
  });

  it('allows and denies real TCP and ICMP by the security groups, and logs the drops', async () => {
    assert.equal((await probe('a', addrs.b.ipv6!, 8080 + 0)).code, 1, 'nothing listens in pod b yet');
    const echo = await startInNs(podNs.b, INET_FIXTURE, [addrs.b.ipv6!, '::']).catch(async () => startInNs(podNs.b, INET_FIXTURE, ['::']));
    try {
      assert.equal((await probe('a', addrs.b.ipv6!, 8080, REACHES_MS)).stdout.trim(), 'ok', 'web → web TCP 8080');
      assert.equal((await sh(inNs(podNs.a, 'busybox', 'ping', '-6', '-c', '1', '-W', '10', addrs.b.ipv6!))).code, 0, 'web → web ICMPv6');
      assert.equal((await probe('c', addrs.b.ipv6!, 8080)).code, 1, 'client → web: not a member of web');
      // A member delta lets c in, as a set-element update.
      const sg = sgClient();
      try {
        await assert.rejects(sg.call('UpdateSecurityGroupMembers', { id: 'web', fromVersion: 5n, toVersion: 6n, addMembers: [addrs.c.ipv6!] }), (e: { code: number }) => e.code === 9);
        await sg.call('UpdateSecurityGroupMembers', { id: 'web', fromVersion: 1n, toVersion: 2n, addMembers: [addrs.c.ipv6!], removeMembers: [] });
      } finally {
        sg.close();
      }
      const deadline = Date.now() + 10_000;
      let ok = false;
      while (!ok && Date.now() < deadline) ok = (await probe('c', addrs.b.ipv6!, 8080)).code === 0;
      assert.ok(ok, 'client → web once c is a member');
    } finally {
      await echo.stop();
    }
    assert.equal((await probe('a', '11.0.0.2', 8080, REACHES_MS)).stdout.trim(), 'ok', 'out to the internet over IPv4, masqueraded');
    assert.equal((await probe('a', '2600:1::2', 8080, REACHES_MS)).stdout.trim(), 'ok', 'out to the internet over IPv6');
    assert.equal((await sh(inNs(podNs.a, 'busybox', 'ping', '-c', '1', '-W', '10', '11.0.0.2'))).code, 0, 'ICMP to the internet');
    assert.equal((await probe('a', '11.0.0.200', 8080)).code, 1, 'a denied prefix');
    assert.equal((await probe('a', '11.0.0.1', 8080, 800)).code, 1, "the node's own address");
    assert.equal((await probe('c', '11.0.0.2', 8080)).code, 1, 'client has no internet');
    // A source the TAP is not the route back to is dropped before anything else, and logged.
    await must(inNs(podNs.a, 'ip', '-6', 'addr', 'add', '2001:db8:1::99/128', 'dev', 'eth0', 'nodad'));
    await must(inNs(podNs.a, 'ip', 'addr', 'add', '169.254.16.99/32', 'dev', 'eth0'));
    assert.equal((await probe('a', '2600:1::2', 8080, 1_000, '2001:db8:1::99')).code, 1, 'a spoofed IPv6 source');
    assert.equal((await probe('a', '11.0.0.2', 8080, 1_000, '169.254.16.99')).code, 1, 'a spoofed IPv4 source');
    await must(inNs(podNs.a, 'ip', '-6', 'addr', 'del', '2001:db8:1::99/128', 'dev', 'eth0'));
    await must(inNs(podNs.a, 'ip', 'addr', 'del', '169.254.16.99/32', 'dev', 'eth0'));
    const pre = await must(inNs(nodeNs, 'nft', 'list', 'chain', 'inet', 'feos', 'prerouting'));
    const chain = await must(inNs(nodeNs, 'nft', 'list', 'chain', 'inet', 'feos', `out-pod-${ids.a}`));
    const logged = (reason: string, text: string) =>
      [...text.matchAll(new RegExp(`counter packets (\\d+) bytes \\d+ log prefix "${reason}"`, 'g'))].reduce((n, m) => n + Number(m[1]), 0);
    assert.ok(logged('deny', chain) > 0, `deny drops logged: ${chain}`);
    assert.ok(logged('spoofed', pre) >= 2, `spoofed drops logged: ${pre}`);
    const chainC = await must(inNs(nodeNs, 'nft', 'list', 'chain', 'inet', 'feos', `out-pod-${ids.c}`));
    assert.ok(logged('no-rule', chainC) > 0, 'no-rule drops logged');
  });

  it('answers name tables, forwards upstream and refuses strangers (dig)', async () => {
    const dig = async (ns: string, ...args: string[]) => must(inNs(ns, 'dig', '@169.254.0.53', '+time=10', '+tries=1', ...args));
    const traffic = grpcStream<WatchTrafficResponse>(TrafficService, join(dir, 'grpc.sock'), 'WatchTraffic', { podIds: [ids.a] });
    const seen = (name: string) => traffic.messages.find((m) => m.record?.kind.case === 'dnsQuery' && m.record.kind.value.name === name)?.record;
    // The stream is open once a query's record arrives on it.
    const deadline = Date.now() + 10_000;
    while (!seen('warmup') && Date.now() < deadline) await dig(podNs.a, 'warmup', 'A');
    assert.ok(seen('warmup'), 'the traffic stream carries the queries');
    const aaaa = await dig(podNs.a, 'API', 'AAAA', '+noall', '+answer', '+comments');
    assert.match(aaaa, /flags: qr aa rd ra/);
    assert.match(aaaa, new RegExp(`API\\.\\s+5\\s+IN\\s+AAAA\\s+${addrs.b.ipv6!.replaceAll(':', '\\:')}`));
    assert.equal((await dig(podNs.a, 'api', 'A', '+short')).trim(), '127.0.0.1');
    assert.equal((await dig(podNs.a, 'db', 'AAAA', '+short')).trim(), '2001:db8:1::77', 'an included table');
    assert.equal((await dig(podNs.a, 'api', 'MX', '+short')).trim(), '', 'no record of another type');
    assert.match(await dig(podNs.a, 'example.test', 'A'), /example\.test\.\s+\d+\s+IN\s+A\s+11\.9\.9\.9/, 'upstream');
    assert.equal((await dig(podNs.a, 'big.test', 'A', '+short')).trim().split('\n').length, 5, 'TCP after a truncated UDP answer');
    const https = await dig(podNs.a, 'ech.test', 'TYPE65', '+noall', '+answer');
    assert.match(https, /alpn="h2"/);
    assert.doesNotMatch(https, /ech=/);
    assert.equal((await dig(podNs.b, 'api', 'AAAA', '+short')).trim(), '', 'b has no tables: upstream says NXDOMAIN');
    assert.match(await dig(inetNs, 'example.test', 'A'), /status: REFUSED/);
    assert.equal((await dig(podNs.a, '+tcp', 'api', 'A', '+short')).trim(), '127.0.0.1', 'over TCP');
    // A delta of the table, and one from another version.
    const nt = ntClient();
    try {
      await nt.call('UpdateNameTable', { id: 'svc', fromVersion: 1n, toVersion: 7n, put: [{ name: 'cache', addresses: ['2001:db8:1::99'] }], remove: ['api'] });
      await assert.rejects(nt.call('UpdateNameTable', { id: 'svc', fromVersion: 1n, toVersion: 8n }), (e: { code: number }) => e.code === 9);
    } finally {
      nt.close();
    }
    assert.equal((await dig(podNs.a, 'cache', 'AAAA', '+short')).trim(), '2001:db8:1::99');
    assert.equal((await dig(podNs.a, 'api', 'AAAA', '+short')).trim(), '::1', 'the included table answers once svc has no api');
    traffic.close();
    const rec = seen('example.test');
    assert.equal(rec?.podId, ids.a);
    assert.deepEqual(rec?.kind.case === 'dnsQuery' && [rec.kind.value.rcode, rec.kind.value.answeredBy, rec.kind.value.addresses], ['NOERROR', '11.0.0.2', ['11.9.9.9']]);
    const own = seen('db');
    assert.deepEqual(own?.kind.case === 'dnsQuery' && own.kind.value.answeredBy, 'name-table/extra');
    assert.ok(!traffic.messages.some((m) => m.record?.podId !== ids.a), "only pod a's records");
  });

  it('serves the metadata service with version-2 tokens', async () => {
    const http = (pod: string, method: string, path: string, ...headers: string[]) =>
      must(inNs(podNs[pod], process.execPath, HTTP_PROBE, method, `http://169.254.169.254${path}`, ...headers));
    assert.match(await http('a', 'GET', '/feos/ipv6'), /\n401$/);
    assert.match(await http('a', 'PUT', '/latest/api/token', 'X-metadata-token-ttl-seconds: 0'), /\n400$/);
    const tok = (await http('a', 'PUT', '/latest/api/token', 'X-metadata-token-ttl-seconds: 60')).split('\n');
    assert.equal(tok[1], '200');
    const h = `X-metadata-token: ${tok[0]}`;
    assert.equal(await http('a', 'GET', '/feos/ipv6', h), `${addrs.a.ipv6}\n200`);
    assert.equal(await http('a', 'GET', '/metadata/role', h), 'web\n200');
    assert.equal(await http('a', 'GET', '/', h), 'feos/\nmetadata/\n200');
    const json = (await http('a', 'GET', '/', h, 'Accept: application/json')).split('\n');
    assert.deepEqual(JSON.parse(json[0]), { feos: { 'pod-id': ids.a, ipv6: addrs.a.ipv6, ipv4: addrs.a.ipv4 }, metadata: { role: 'web' } });
    // Another pod's token is not this one's.
    const other = (await http('b', 'PUT', '/latest/api/token', 'X-metadata-token-ttl-seconds: 60')).split('\n')[0];
    assert.match(await http('a', 'GET', '/feos/ipv6', `X-metadata-token: ${other}`), /\n401$/);
  });

  it('takes a deleted pod off the network and out of connection tracking', async () => {
    assert.equal((await probe('a', '11.0.0.2', 8080, REACHES_MS)).code, 0);
    const before = await sh(inNs(nodeNs, 'conntrack', '-L', '-s', addrs.a.ipv4!));
    assert.match(before.stdout, /dport=8080/);
    const r = await ctl({ method: 'removePod', id: ids.a });
    assert.ok(r.ok, r.message ?? '');
    const afterList = await sh(inNs(nodeNs, 'conntrack', '-L', '-s', addrs.a.ipv4!));
    assert.doesNotMatch(afterList.stdout, /dport=8080/);
    assert.equal((await sh(inNs(nodeNs, 'ip', 'link', 'show', `pod-${ids.a}`))).code, 1, 'the TAP is gone');
    const text = await must(inNs(nodeNs, 'nft', 'list', 'table', 'inet', 'feos'));
    assert.doesNotMatch(text, new RegExp(`out-pod-${ids.a}`));
  });

  it('keeps the addresses across a restart of the layer', async () => {
    await node!.stop();
    const kept = (['b', 'c'] as const).map((p) => ({ id: ids[p], network: specs[p], ...addrs[p] }));
    const r = await startNode(kept);
    assert.equal(r.unavailable, null);
    assert.deepEqual(r.kept[ids.b], addrs.b);
    assert.deepEqual(r.kept[ids.c], addrs.c);
    // b's link stayed and it stays in the table; c's membership of web was kept.
    const echo = await startInNs(podNs.b, INET_FIXTURE, ['::']);
    try {
      assert.equal((await probe('c', addrs.b.ipv6!, 8080, REACHES_MS)).code, 0);
    } finally {
      await echo.stop();
    }
    // Pod d through the pod layer's interface, on a TAP device the layer makes.
    const pod = { id: ids.d, ipv6Address: '', ipv4Address: '', spec: { network: { securityGroups: [], nameTables: [], dnsUpstreams: ['11.0.0.2'] }, metadata: {} } };
    const d = await ctl({ method: 'setUp', pod });
    assert.ok(d.ok, d.message ?? '');
    const at = d.result as { ipv6Address: string; ipv4Address: string; tap: string };
    // IPv6 never again (a's ::2 is not handed out); IPv4 the lowest never handed out before a's freed one.
    assert.deepEqual([at.ipv6Address, at.ipv4Address], ['2001:db8:1::5', '169.254.16.4']);
    const [link] = JSON.parse(await must(inNs(nodeNs, 'ip', '-j', '-d', 'link', 'show', 'dev', at.tap))) as Array<{ linkinfo?: { info_kind?: string } }>;
    assert.equal(link.linkinfo?.info_kind, 'tun');
    assert.ok((await ctl({ method: 'tearDown', pod })).ok);
    assert.equal((await sh(inNs(nodeNs, 'ip', 'link', 'show', at.tap))).code, 1, 'the TAP is gone');
  });
});
