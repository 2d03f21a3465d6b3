// The pods' resolver (seed: "DNS") on loopback: name tables with authority, upstreams over UDP
// with TCP fallback, ech stripped, refusals, query records. The pod is 127.0.0.1; 127.0.0.2 is a stranger.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import net from 'node:net';
import { create } from '@bufbuild/protobuf';
import packet from 'dns-packet';
import { NameTableSchema, type NameTable } from '../../src/feos/gen/feos/network/v1/network_pb.js';
import { createLogger } from '../../src/lib/index.ts';
import { Resolver, bindResolverSockets, lookupName, stripEch, type DnsQueryRecord } from '../../src/feos/network/index.ts';

const tables = new Map<string, NameTable>([
  ['svc', create(NameTableSchema, { id: 'svc', version: 1n, names: [{ name: 'api', addresses: ['2001:db8::5', '127.0.0.9'] }], includes: ['extra', 'gone'] })],
  ['extra', create(NameTableSchema, { id: 'extra', version: 1n, names: [{ name: 'db', addresses: ['2001:db8::6'] }, { name: 'api', addresses: ['::1'] }], includes: ['deep'] })],
  ['deep', create(NameTableSchema, { id: 'deep', version: 1n, names: [{ name: 'hidden', addresses: ['2001:db8::7'] }] })],
]);

let upstreamUdp: dgram.Socket;
let upstreamTcp: net.Server;
let upstreamPort = 0;
let resolver: Resolver;
let port = 0;
const records: DnsQueryRecord[] = [];

function upstreamAnswer(q: packet.Packet, transport: string): Buffer {
  const question = q.questions![0];
  const base = { type: 'response' as const, id: q.id, flags: packet.RECURSION_AVAILABLE, questions: q.questions };
  if (question.name === 'big.test' && transport === 'udp') {
    const b = packet.encode(base);
    b.writeUInt16BE(b.readUInt16BE(2) | 0x0200, 2);
    return b;
  }
  const n = question.name === 'big.test' ? 5 : 1;
  return packet.encode({ ...base, answers: Array.from({ length: n }, (_, i) => ({ type: 'A' as const, name: question.name, ttl: 60, data: `192.0.2.${i + 1}` })) });
}

before(async () => {
  upstreamUdp = dgram.createSocket('udp4');
  upstreamUdp.on('message', (m, r) => upstreamUdp.send(upstreamAnswer(packet.decode(m), 'udp'), r.port, r.address));
  upstreamTcp = net.createServer((c) => {
    c.once('data', (d) => {
      const resp = upstreamAnswer(packet.decode((d as Buffer).subarray(2)), 'tcp');
      const len = Buffer.alloc(2);
      len.writeUInt16BE(resp.length);
      c.end(Buffer.concat([len, resp]));
    });
  });
  // The fake upstream answers UDP and TCP on one port: take a free UDP port, and another when TCP
  // finds that number in use (an ephemeral port of some other connection on this busy machine).
  for (let attempt = 1; ; attempt++) {
    await new Promise<void>((r) => upstreamUdp.bind(0, '127.0.0.1', r));
    upstreamPort = upstreamUdp.address().port;
    try {
      await new Promise<void>((resolve, reject) => {
        upstreamTcp.once('error', reject);
        upstreamTcp.listen(upstreamPort, '127.0.0.1', () => {
          upstreamTcp.off('error', reject);
          resolve();
        });
      });
      break;
    } catch (err: unknown) {
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE' || attempt >= 20) throw err;
      await new Promise<void>((r) => upstreamUdp.close(() => r()));
      upstreamUdp = dgram.createSocket('udp4');
      upstreamUdp.on('message', (m, r) => upstreamUdp.send(upstreamAnswer(packet.decode(m), 'udp'), r.port, r.address));
    }
  }
  resolver = new Resolver({
    podBySource: (a) => (a === '127.0.0.1' ? { podId: 'abcdefghjkm', nameTables: ['svc'], upstreams: [] } : undefined),
    tables: () => tables,
    defaultUpstreams: () => ['127.0.0.3', '127.0.0.1'],
    upstreamPort,
    upstreamTimeoutMs: 500,
    onQuery: (r) => records.push(r),
    log: createLogger('test', {}),
  });
  const s = await bindResolverSockets('127.0.0.1', 0);
  port = s.udp.address().port;
  resolver.serve(s.udp, s.tcp);
});

after(async () => {
  await resolver.close();
  upstreamUdp.close();
  upstreamTcp.close();
});

function ask(name: string, type: string, from = '127.0.0.1'): Promise<packet.Packet> {
  return new Promise((resolve, reject) => {
    const s = dgram.createSocket('udp4');
    const timer = setTimeout(() => {
      s.close();
      reject(new Error('no answer'));
    }, 5_000);
    s.on('message', (m) => {
      clearTimeout(timer);
      s.close();
      resolve(packet.decode(m));
    });
    s.bind(0, from, () => s.send(packet.encode({ type: 'query', id: 7, flags: packet.RECURSION_DESIRED, questions: [{ type: type as 'A', name }] }), port, '127.0.0.1'));
  });
}

test('lookupName: the first table wins, own names before includes, one level of includes', () => {
  assert.deepEqual(lookupName('API.', ['svc'], tables), { table: 'svc', addresses: ['2001:db8::5', '127.0.0.9'] });
  assert.deepEqual(lookupName('db', ['svc'], tables), { table: 'extra', addresses: ['2001:db8::6'] });
  assert.equal(lookupName('hidden', ['svc'], tables), undefined, "an included table's includes are not followed");
  assert.deepEqual(lookupName('hidden', ['gone', 'deep'], tables)?.table, 'deep');
  assert.equal(lookupName('api.example', ['svc'], tables), undefined, 'one label only');
});

test('answers a name of the tables with authority, TTL 5, only of its family', { timeout: 10_000 }, async () => {
  const a = await ask('Api', 'AAAA');
  assert.ok((a.flags ?? 0) & packet.AUTHORITATIVE_ANSWER);
  assert.deepEqual(a.answers?.map((x) => [x.type, (x as { data: string }).data, (x as { ttl: number }).ttl]), [['AAAA', '2001:db8::5', 5]]);
  const four = await ask('api', 'A');
  assert.deepEqual(four.answers?.map((x) => (x as { data: string }).data), ['127.0.0.9']);
  const mx = await ask('api', 'MX');
  assert.equal((mx as { rcode?: string }).rcode, 'NOERROR');
  assert.equal(mx.answers?.length, 0);
});

test('forwards other names upstream in order, with TCP after a truncated answer', { timeout: 10_000 }, async () => {
  const r = await ask('example.test', 'A');
  assert.deepEqual(r.answers?.map((x) => (x as { data: string }).data), ['192.0.2.1']);
  assert.equal(r.id, 7);
  const big = await ask('big.test', 'A');
  assert.equal(big.answers?.length, 5);
  const rec = records.find((x) => x.name === 'example.test');
  assert.equal(rec?.answeredBy, '127.0.0.1', 'the first upstream did not answer, the second did');
});

test('refuses a source that is no pod', { timeout: 10_000 }, async () => {
  const r = await ask('example.test', 'A', '127.0.0.2');
  assert.equal((r as { rcode?: string }).rcode, 'REFUSED');
  assert.equal(records.at(-1)?.rcode, 'REFUSED');
});

test('takes ech out of HTTPS records and leaves the rest', () => {
  const rdata = Buffer.from([0, 1, 0, 0, 1, 0, 3, 2, 0x68, 0x32, 0, 5, 0, 4, 1, 2, 3, 4]);
  const resp = packet.encode({ type: 'response', id: 1, questions: [{ type: 'UNKNOWN_65' as 'A', name: 'x.test' }], answers: [{ type: 'UNKNOWN_65' as 'A', name: 'x.test', ttl: 5, data: rdata as unknown as string }] });
  const out = packet.decode(stripEch(resp));
  assert.deepEqual([...((out.answers![0] as { data: Buffer }).data)], [0, 1, 0, 0, 1, 0, 3, 2, 0x68, 0x32]);
  const plain = packet.encode({ type: 'response', id: 1, questions: [{ type: 'A', name: 'y.test' }] });
  assert.equal(stripEch(plain), plain);
});
