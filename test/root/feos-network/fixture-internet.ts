// The fake internet, for the root suites: run inside its own network namespace. It echoes TCP
// on port 8080 of every address given, and is a DNS upstream on port 53 of the first:
// example.test A 11.9.9.9; big.test truncated over UDP and five A records over TCP; ech.test an
// HTTPS record with alpn and ech; anything else NXDOMAIN.
import dgram from 'node:dgram';
import net from 'node:net';
import packet from 'dns-packet';

const addresses = process.argv.slice(2);
const servers: net.Server[] = [];
for (const a of addresses) {
  const s = net.createServer((c) => {
    // A client that resets (as one whose TLS hello came back as nonsense) is no failure of the echo.
    c.on('error', () => {});
    c.pipe(c);
  });
  await new Promise<void>((r) => s.listen({ host: a, port: 8080 }, r));
  servers.push(s);
}

function answer(q: packet.Packet, transport: 'udp' | 'tcp'): Buffer {
  const question = q.questions![0];
  const base = { type: 'response' as const, id: q.id, flags: packet.RECURSION_AVAILABLE | packet.RECURSION_DESIRED, questions: q.questions };
  if (question.name === 'example.test' && question.type === 'A') {
    return packet.encode({ ...base, answers: [{ type: 'A', name: 'example.test', ttl: 60, data: '11.9.9.9' }] });
  }
  if (question.name === 'big.test') {
    if (transport === 'udp') {
      const b = packet.encode(base);
      b.writeUInt16BE(b.readUInt16BE(2) | 0x0200, 2);
      return b;
    }
    return packet.encode({ ...base, answers: [1, 2, 3, 4, 5].map((i) => ({ type: 'A' as const, name: 'big.test', ttl: 60, data: `11.9.9.${i}` })) });
  }
  if (question.name === 'ech.test') {
    // priority 1, target ".", alpn="h2", ech=<4 bytes>
    const rdata = Buffer.from([0, 1, 0, 0, 1, 0, 3, 2, 0x68, 0x32, 0, 5, 0, 4, 1, 2, 3, 4]);
    return packet.encode({ ...base, answers: [{ type: 'UNKNOWN_65' as 'A', name: 'ech.test', ttl: 60, data: rdata as unknown as string }] });
  }
  return packet.encode({ ...base, flags: base.flags | 3 });
}

const udp = dgram.createSocket(addresses[0].includes(':') ? 'udp6' : 'udp4');
udp.on('message', (msg, rinfo) => udp.send(answer(packet.decode(msg), 'udp'), rinfo.port, rinfo.address));
await new Promise<void>((r) => udp.bind({ address: addresses[0], port: 53 }, r));
const tcp = net.createServer((c) => {
  let buf = Buffer.alloc(0);
  c.on('data', (d) => {
    buf = Buffer.concat([buf, d as Buffer]);
    if (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
      const resp = answer(packet.decode(buf.subarray(2, 2 + buf.readUInt16BE(0))), 'tcp');
      const len = Buffer.alloc(2);
      len.writeUInt16BE(resp.length);
      c.end(Buffer.concat([len, resp]));
    }
  });
  c.on('error', () => {});
});
await new Promise<void>((r) => tcp.listen({ host: addresses[0], port: 53 }, r));
process.stdout.write('ready\n');
process.on('SIGTERM', () => process.exit(0));
