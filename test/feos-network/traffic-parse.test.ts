// The traffic records' readers (seed: "Traffic records"): a TLS ClientHello's server name and an
// HTTP request's Host from a connection's first bytes, however they are cut; nflog packets in a
// pcap stream; connection tracking's event lines; the pods by address with those that left.
// Malformed, truncated and fragmented input never throws.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import tls from 'node:tls';
import fc from 'fast-check';
import {
  PcapNflogReader,
  RecentPods,
  ServerNameAssembler,
  flowEntries,
  nflogEntries,
  parseConntrackLine,
  parseCtimeUtc,
  parseIpPacket,
  parseNflog,
  scanHttpRequest,
  scanServerName,
  scanTlsClientHello,
  type NflogPacket,
} from '../../src/feos/network/index.ts';

/** The first bytes Node's TLS client sends to a server named `servername`: a real ClientHello. */
async function clientHello(servername: string): Promise<Buffer> {
  const got: Buffer[] = [];
  const server = net.createServer((c) => {
    c.on('data', (d) => {
      got.push(d as Buffer);
      const all = Buffer.concat(got);
      if (all.length >= 5 && all.length >= 5 + all.readUInt16BE(3)) c.destroy();
    });
    c.on('error', () => {});
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => {
    const s = tls.connect({ host: '127.0.0.1', port, servername, rejectUnauthorized: false });
    s.on('error', () => resolve());
    s.on('close', () => resolve());
  });
  server.close();
  return Buffer.concat(got);
}

/** The same handshake in TLS records of at most `size` bytes each. */
function rerecord(hello: Buffer, size: number): Buffer {
  const body = hello.subarray(5, 5 + hello.readUInt16BE(3));
  const out: Buffer[] = [];
  for (let i = 0; i < body.length; i += size) {
    const part = body.subarray(i, i + size);
    const h = Buffer.from([0x16, 0x03, 0x01, 0, 0]);
    h.writeUInt16BE(part.length, 3);
    out.push(h, part);
  }
  return Buffer.concat(out);
}

test('a real ClientHello names its server; every truncation of it is incomplete until the name is whole', { timeout: 20_000 }, async () => {
  const hello = await clientHello('Api.Example.COM');
  assert.deepEqual(scanTlsClientHello(hello), { status: 'name', protocol: 'tls', name: 'api.example.com' });
  let firstWhole = -1;
  for (let n = 0; n <= hello.length; n++) {
    const r = scanServerName(hello.subarray(0, n));
    if (r.status === 'name') {
      if (firstWhole < 0) firstWhole = n;
      assert.equal(r.name, 'api.example.com');
    } else {
      assert.equal(firstWhole, -1, `once found, a longer prefix finds it too (${n})`);
      assert.equal(r.status, 'incomplete', `a prefix of ${n} bytes`);
    }
  }
  assert.ok(firstWhole > 0 && firstWhole < hello.length);
  // The handshake spread over TLS records of any size.
  for (const size of [1, 7, 64, 200]) assert.deepEqual(scanServerName(rerecord(hello, size)), { status: 'name', protocol: 'tls', name: 'api.example.com' }, `records of ${size}`);
});

test('a ClientHello in segments of any size, in any order, some twice, is reassembled', { timeout: 60_000 }, async () => {
  const hello = await clientHello('sni.test');
  await fc.assert(
    fc.asyncProperty(fc.array(fc.integer({ min: 1, max: hello.length }), { minLength: 1, maxLength: 6 }), fc.integer(), fc.boolean(), fc.nat(), async (cuts, seed, dup, isn) => {
      const points = [...new Set([0, ...cuts.map((c) => Math.min(c, hello.length)), hello.length])].sort((a, b) => a - b);
      const segs = points.slice(1).map((end, i) => ({ off: points[i], bytes: hello.subarray(points[i], end) }));
      // A shuffle by the seed.
      const order = segs.map((s, i) => ({ s, k: (Math.imul(i + 1, seed | 1) >>> 0) % 1009 })).sort((a, b) => a.k - b.k).map((x) => x.s);
      if (dup) order.splice(order.length > 1 ? 1 : 0, 0, order[0]);
      const a = new ServerNameAssembler();
      const key = '169.254.16.1 40000 11.0.0.2 443';
      const base = isn >>> 0;
      assert.equal(a.push({ key, seq: base, syn: true, fin: false, rst: false, payload: new Uint8Array(0) }), undefined);
      let found: { protocol: string; name: string } | undefined;
      for (const s of order) found ??= a.push({ key, seq: (base + 1 + s.off) >>> 0, syn: false, fin: false, rst: false, payload: s.bytes });
      assert.deepEqual(found, { protocol: 'tls', name: 'sni.test' });
      assert.equal(a.size, 0, 'a connection whose name was found is forgotten');
    }),
    { numRuns: 200 },
  );
});

test('HTTP requests name their Host without its port', () => {
  const enc = (s: string) => Buffer.from(s, 'latin1');
  assert.deepEqual(scanHttpRequest(enc('GET / HTTP/1.1\r\nUser-Agent: x\r\nHOST: Web.Example:8080\r\n\r\n')), { status: 'name', protocol: 'http', name: 'web.example' });
  assert.deepEqual(scanHttpRequest(enc('POST /a HTTP/1.1\r\nhost: [2001:DB8::1]:80\r\n\r\n')), { status: 'name', protocol: 'http', name: '2001:db8::1' });
  assert.deepEqual(scanHttpRequest(enc('GET http://proxy.example/x HTTP/1.0\r\n\r\n')), { status: 'name', protocol: 'http', name: 'proxy.example' });
  assert.deepEqual(scanHttpRequest(enc('GET / HTTP/1.1\r\nAccept: */*\r\n\r\n')), { status: 'none' }, 'no Host');
  assert.deepEqual(scanHttpRequest(enc('GET / HTTP/1.1\r\nHost: bad name\r\n\r\n')), { status: 'none' });
  assert.deepEqual(scanServerName(enc('SSH-2.0-OpenSSH_9.2\r\n')), { status: 'none' });
  assert.deepEqual(scanServerName(enc('\x00\x01binary')), { status: 'none' });
  const req = 'GET /index.html HTTP/1.1\r\nAccept: */*\r\nHost: web.example\r\nConnection: close\r\n\r\n';
  const whole = req.indexOf('\r\nConnection') + 2; // the Host line ended
  for (let n = 0; n <= req.length; n++) {
    const r = scanServerName(enc(req.slice(0, n)));
    assert.equal(r.status, n >= whole ? 'name' : 'incomplete', `a prefix of ${n} bytes: ${JSON.stringify(r)}`);
  }
});

test('no input makes a reader throw', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 600 }), (b) => {
      scanServerName(b);
      scanTlsClientHello(b);
      scanHttpRequest(b);
      parseIpPacket(b);
      parseNflog(b, 0);
      const r = new PcapNflogReader(() => {});
      r.push(b);
    }),
    { numRuns: 2000 },
  );
  // TLS-looking and HTTP-looking starts, followed by anything.
  fc.assert(
    fc.property(fc.constantFrom([0x16, 0x03, 0x01], [0x16, 0x03, 0x03, 0x00, 0x40, 0x01], [...Buffer.from('GET / HTTP/1.1\r\n')]), fc.uint8Array({ maxLength: 400 }), (head, tail) => {
      const r = scanServerName(Uint8Array.from([...head, ...tail]));
      assert.ok(['name', 'incomplete', 'none'].includes(r.status));
    }),
    { numRuns: 2000 },
  );
  fc.assert(
    fc.property(fc.string({ maxLength: 300 }), (s) => {
      parseConntrackLine(s);
      parseConntrackLine(`[1.2]\t[DESTROY] ${s}`);
    }),
    { numRuns: 1000 },
  );
});

/** An nflog packet of group `group` with a prefix, interfaces and an IP payload, as libpcap captures it. */
function nflogBytes(group: number, prefix: string, inIf: number, outIf: number, payload: Buffer): Buffer {
  const tlv = (type: number, v: Buffer) => {
    const h = Buffer.alloc(4);
    h.writeUInt16LE(4 + v.length, 0);
    h.writeUInt16LE(type, 2);
    const pad = Buffer.alloc((4 - ((4 + v.length) % 4)) % 4);
    return Buffer.concat([h, v, pad]);
  };
  const u32 = (n: number) => {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(n);
    return b;
  };
  const head = Buffer.from([2, 0, 0, 0]);
  head.writeUInt16BE(group, 2);
  return Buffer.concat([head, tlv(10, Buffer.from(`${prefix}\0`)), tlv(4, u32(inIf)), tlv(5, u32(outIf)), tlv(9, payload)]);
}

function ipv4Tcp(src: number[], dst: number[], sport: number, dport: number, seq: number, flags: number, data: Buffer): Buffer {
  const ip = Buffer.alloc(20);
  ip[0] = 0x45;
  ip.writeUInt16BE(40 + data.length, 2);
  ip[8] = 64;
  ip[9] = 6;
  Buffer.from(src).copy(ip, 12);
  Buffer.from(dst).copy(ip, 16);
  const tcp = Buffer.alloc(20);
  tcp.writeUInt16BE(sport, 0);
  tcp.writeUInt16BE(dport, 2);
  tcp.writeUInt32BE(seq >>> 0, 4);
  tcp[12] = 5 << 4;
  tcp[13] = flags;
  return Buffer.concat([ip, tcp, data]);
}

test('a pcap stream of nflog packets, fed in pieces, gives each packet with its prefix, interfaces and IP headers', () => {
  const gh = Buffer.alloc(24);
  gh.writeUInt32LE(0xa1b2c3d4, 0);
  gh.writeUInt16LE(2, 4);
  gh.writeUInt16LE(4, 6);
  gh.writeUInt32LE(262144, 16);
  gh.writeUInt32LE(239, 20);
  const pkt = nflogBytes(2, 'no-rule', 7, 0, ipv4Tcp([169, 254, 16, 3], [11, 0, 0, 2], 40000, 8080, 1, 0x02, Buffer.alloc(0)));
  const rec = Buffer.alloc(16);
  rec.writeUInt32LE(1_700_000_000, 0);
  rec.writeUInt32LE(250_000, 4);
  rec.writeUInt32LE(pkt.length, 8);
  rec.writeUInt32LE(pkt.length, 12);
  const stream = Buffer.concat([gh, rec, pkt, rec, pkt]);
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 1, max: stream.length }), { maxLength: 5 }), (cuts) => {
      const got: NflogPacket[] = [];
      const r = new PcapNflogReader((p) => got.push(p));
      const points = [...new Set([0, ...cuts, stream.length])].sort((a, b) => a - b);
      for (let i = 1; i < points.length; i++) r.push(stream.subarray(points[i - 1], points[i]));
      assert.equal(r.error, undefined);
      assert.equal(got.length, 2);
      assert.deepEqual({ ...got[0], payload: undefined }, { timeMs: 1_700_000_000_250, group: 2, prefix: 'no-rule', inIfindex: 7, outIfindex: 0, payload: undefined });
      const ip = parseIpPacket(got[0].payload)!;
      assert.deepEqual([ip.family, ip.source, ip.destination, ip.protocol, ip.sourcePort, ip.destinationPort, ip.length], [4, '169.254.16.3', '11.0.0.2', 6, 40000, 8080, 40]);
      assert.equal(ip.tcp?.syn, true);
    }),
  );
  const bad = new PcapNflogReader(() => assert.fail('no packet from a stream of another link type'));
  const other = Buffer.from(gh);
  other.writeUInt32LE(1, 20);
  bad.push(other);
  assert.match(bad.error ?? '', /link type 1, not NFLOG/);
});

test('IPv6 packets: addresses in RFC 5952 text, ports past extension headers', () => {
  const ip = Buffer.alloc(40);
  ip[0] = 0x60;
  ip.writeUInt16BE(8 + 8, 4);
  ip[6] = 60; // destination options first
  Buffer.from('20010db8000100000000000000000002', 'hex').copy(ip, 8);
  Buffer.from('26000001000000000000000000000002', 'hex').copy(ip, 24);
  const opts = Buffer.from([17, 0, 1, 4, 0, 0, 0, 0]);
  const udp = Buffer.from([0x9c, 0x40, 0x00, 0x35, 0, 8, 0, 0]);
  const p = parseIpPacket(Buffer.concat([ip, opts, udp]))!;
  assert.deepEqual([p.family, p.source, p.destination, p.protocol, p.sourcePort, p.destinationPort], [6, '2001:db8:1::2', '2600:1::2', 17, 40000, 53]);
});

test("connection tracking's event lines", () => {
  const end = parseConntrackLine(
    '[1796186864.082746]\t[DESTROY] ipv6     10 tcp      6 TIME_WAIT src=2001:db8:1::2 dst=2600:1::2 sport=53086 dport=8080 packets=5 bytes=406 src=2600:1::2 dst=2001:db8:1::2 sport=8080 dport=53086 packets=4 bytes=482 [ASSURED] delta-time=1 [start=Wed Dec  2 04:47:20 2026] [stop=Wed Dec  2 04:47:21 2026] id=2472184360',
  )!;
  assert.equal(end.event, 'end');
  assert.equal(end.protocol, 6);
  assert.deepEqual(end.original, { source: '2001:db8:1::2', destination: '2600:1::2', sourcePort: 53086, destinationPort: 8080, packets: 5, bytes: 406 });
  assert.deepEqual(end.reply, { source: '2600:1::2', destination: '2001:db8:1::2', sourcePort: 8080, destinationPort: 53086, packets: 4, bytes: 482 });
  assert.equal(end.startMs, Date.UTC(2026, 11, 2, 4, 47, 20));
  assert.equal(end.stopMs, Date.UTC(2026, 11, 2, 4, 47, 21));
  assert.equal(end.id, 2472184360);
  assert.equal(end.timeMs, 1796186864082);
  const icmp = parseConntrackLine('[1.5]\t    [NEW] ipv4     2 icmp     1 30 src=169.254.16.1 dst=11.0.0.2 type=8 code=0 id=77 [UNREPLIED] src=11.0.0.2 dst=11.0.0.1 type=0 code=0 id=77 id=999')!;
  assert.equal(icmp.event, 'new');
  assert.equal(icmp.id, 999, "the entry's id, not the ICMP tuple's");
  assert.equal(icmp.reply.destination, '11.0.0.1', 'the reply as masqueraded');
  const deleted = parseConntrackLine(
    '[1796187688.470505]\t[DESTROY] ipv4     2 udp      17 29 src=127.0.0.1 dst=127.0.0.1 sport=33994 dport=5354 packets=1 bytes=29 [UNREPLIED] src=127.0.0.1 dst=127.0.0.1 sport=5354 dport=33994 packets=0 bytes=0 delta-time=0 [start=Wed Dec  2 05:01:28 2026] [stop=Wed Dec  2 05:01:28 2026] id=736016422 [USERSPACE] portid=2867975956',
  )!;
  assert.equal(deleted.id, 736016422, 'an entry deleted by conntrack -D');
  assert.equal(deleted.original.packets, 1);
  assert.equal(parseConntrackLine('conntrack v1.4.7 (conntrack-tools): 2 flow events have been shown.'), undefined);
  assert.equal(parseCtimeUtc('Thu Jan  1 00:00:09 1970'), 9000);
  assert.equal(parseCtimeUtc('yesterday'), 0);
});

test('flows name each pod at an end, from its side, and leave out the queries to the resolver', () => {
  const pods = { podOf: (a: string) => ({ '169.254.16.1': 'aaaaaaaaaaa', '2001:db8:1::2': 'aaaaaaaaaaa', '2001:db8:1::3': 'bbbbbbbbbbb' })[a] };
  const ev = (src: string, dst: string, dport: number, proto = 6) =>
    parseConntrackLine(`[10.0]\t[DESTROY] ipv4 2 tcp ${proto} CLOSE src=${src} dst=${dst} sport=40000 dport=${dport} packets=3 bytes=300 src=${dst} dst=${src} sport=${dport} dport=40000 packets=2 bytes=120 [start=Thu Jan  1 00:00:05 1970] [stop=Thu Jan  1 00:00:09 1970] id=5`)!;
  assert.deepEqual(flowEntries(ev('169.254.16.1', '169.254.0.53', 53), pods, '169.254.0.53'), []);
  assert.deepEqual(flowEntries(ev('169.254.16.1', '169.254.0.53', 53, 17), pods, '169.254.0.53'), []);
  assert.deepEqual(flowEntries(ev('11.0.0.5', '11.0.0.2', 80), pods, '169.254.0.53'), [], 'no pod at either end');
  const out = flowEntries(ev('169.254.16.1', '11.0.0.2', 443), pods, '169.254.0.53');
  assert.equal(out.length, 1);
  assert.equal(out[0].podId, 'aaaaaaaaaaa');
  assert.equal(out[0].timeMs, 9000n);
  const f = out[0].kind.case === 'flow' ? out[0].kind.value : assert.fail('a flow');
  assert.deepEqual(
    [f.event, f.direction, f.protocol, f.podAddress, f.podPort, f.peerAddress, f.peerPort, f.packetsSent, f.bytesSent, f.packetsReceived, f.bytesReceived, f.startMs, f.endMs, f.conntrackId],
    ['end', 'out', 'tcp', '169.254.16.1', 40000, '11.0.0.2', 443, 3n, 300n, 2n, 120n, 5000n, 9000n, 5],
  );
  const both = flowEntries(ev('2001:db8:1::2', '2001:db8:1::3', 8080), pods, '169.254.0.53');
  assert.deepEqual(
    both.map((e) => [e.podId, e.kind.case === 'flow' && e.kind.value.direction, e.kind.case === 'flow' && e.kind.value.bytesSent]),
    [
      ['aaaaaaaaaaa', 'out', 300n],
      ['bbbbbbbbbbb', 'in', 120n],
    ],
  );
});

test('a pod that left is known by its addresses for five minutes, unless another pod holds one', () => {
  let now = 0;
  const held = new Map<string, string>();
  const pods = new RecentPods((a) => held.get(a), () => now);
  held.set('169.254.16.1', 'aaaaaaaaaaa');
  assert.equal(pods.podOf('169.254.16.1'), 'aaaaaaaaaaa');
  held.delete('169.254.16.1');
  pods.left('aaaaaaaaaaa', ['169.254.16.1', '2001:DB8:1::0002']);
  now = 4 * 60_000;
  assert.ok(pods.knows('aaaaaaaaaaa'), 'a pod that left is known (traffic watch --pod takes it)');
  assert.ok(!pods.knows('ddddddddddd'));
  assert.equal(pods.podOf('2001:db8:1::2'), 'aaaaaaaaaaa', 'by either address, canonical');
  assert.equal(pods.podOf('169.254.16.1'), 'aaaaaaaaaaa');
  now = 5 * 60_000;
  assert.equal(pods.podOf('169.254.16.1'), undefined, 'five minutes on');
  assert.ok(!pods.knows('aaaaaaaaaaa'), 'nor by its ID');
  pods.left('bbbbbbbbbbb', ['169.254.16.2', '2001:db8:1::3']);
  held.set('169.254.16.2', 'ccccccccccc');
  assert.equal(pods.podOf('2001:db8:1::3'), undefined, 'another pod holds its IPv4 address');
  assert.equal(pods.podOf('169.254.16.2'), 'ccccccccccc');
  assert.equal(pods.podOf('not an address'), undefined);
});

test('logged packets: drops named by their TAPs (a packet between two pods is a drop of each), server names by the sender', () => {
  const taps: Record<string, string> = { 'pod-aaaaaaaaaaa': 'aaaaaaaaaaa', 'pod-bbbbbbbbbbb': 'bbbbbbbbbbb' };
  const pods = { podOf: (a: string) => ({ '169.254.16.1': 'aaaaaaaaaaa' })[a], podOfTap: (t: string) => taps[t] };
  const names = new ServerNameAssembler();
  const pkt = (group: number, prefix: string, payload: Buffer): NflogPacket => ({ timeMs: 5, group, prefix, inIfindex: 0, outIfindex: 0, payload });
  const syn = ipv4Tcp([169, 254, 16, 99], [11, 0, 0, 2], 40000, 443, 0, 0x02, Buffer.alloc(0));
  const spoofed = nflogEntries(pkt(2, 'spoofed', syn), 'pod-aaaaaaaaaaa', undefined, pods, names);
  assert.deepEqual(spoofed.map((e) => [e.podId, e.kind.case === 'drop' && e.kind.value.reason, e.kind.case === 'drop' && e.kind.value.direction]), [['aaaaaaaaaaa', 'spoofed', 'out']]);
  const between = nflogEntries(pkt(2, 'no-rule', syn), 'pod-aaaaaaaaaaa', 'pod-bbbbbbbbbbb', pods, names);
  assert.deepEqual(between.map((e) => [e.podId, e.kind.case === 'drop' && e.kind.value.direction]), [['aaaaaaaaaaa', 'out'], ['bbbbbbbbbbb', 'in']]);
  const inbound = nflogEntries(pkt(2, 'deny', syn), 'up0', 'pod-bbbbbbbbbbb', pods, names);
  assert.deepEqual(inbound.map((e) => [e.podId, e.kind.case === 'drop' && e.kind.value.direction]), [['bbbbbbbbbbb', 'in']]);
  // A request in two segments, after the SYN: one record, once the Host line is whole.
  const req = Buffer.from('GET / HTTP/1.1\r\nHost: two.example\r\n\r\n');
  const src = [169, 254, 16, 1];
  assert.deepEqual(nflogEntries(pkt(3, '', ipv4Tcp(src, [11, 0, 0, 2], 40001, 80, 100, 0x02, Buffer.alloc(0))), 'pod-aaaaaaaaaaa', 'up0', pods, names), []);
  assert.deepEqual(nflogEntries(pkt(3, '', ipv4Tcp(src, [11, 0, 0, 2], 40001, 80, 101, 0x18, req.subarray(0, 20))), 'pod-aaaaaaaaaaa', 'up0', pods, names), []);
  const named = nflogEntries(pkt(3, '', ipv4Tcp(src, [11, 0, 0, 2], 40001, 80, 121, 0x18, req.subarray(20))), 'pod-aaaaaaaaaaa', 'up0', pods, names);
  assert.deepEqual(named.map((e) => [e.podId, e.kind.case === 'serverName' && e.kind.value.name, e.kind.case === 'serverName' && e.kind.value.destinationPort]), [['aaaaaaaaaaa', 'two.example', 80]]);
  assert.deepEqual(nflogEntries(pkt(3, '', Buffer.from([0x45, 1, 2])), 'pod-aaaaaaaaaaa', 'up0', pods, names), [], 'not an IP packet');
});
