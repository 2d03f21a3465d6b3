// A client for the traffic records' root suite, run inside a pod's namespace:
//   traffic-probe.ts tls HOST PORT SERVERNAME    sends a TLS ClientHello naming SERVERNAME (the echo answers no TLS)
//   traffic-probe.ts http HOST PORT HOSTNAME     sends an HTTP request with Host: HOSTNAME and reads the echo
//   traffic-probe.ts dns COUNT PREFIX            asks the resolver COUNT A queries, PREFIX-<i>.test, 16 at a time
// Prints "ok" (dns: "answered N") and exits 0; exits 1 with the reason otherwise.
import dgram from 'node:dgram';
import net from 'node:net';
import tls from 'node:tls';
import packet from 'dns-packet';

const [mode, ...args] = process.argv.slice(2);
const fail = (why: string) => {
  console.log(why);
  process.exit(1);
};
setTimeout(() => fail('timeout'), 60_000).unref();

if (mode === 'tls') {
  const [host, port, servername] = args;
  const s = tls.connect({ host, port: Number(port), servername, rejectUnauthorized: false });
  // The echo sends the ClientHello back, which no client takes for a ServerHello: an error after the hello went out.
  s.on('error', () => {
    console.log('ok');
    process.exit(0);
  });
  s.on('secureConnect', () => fail('a TLS server answered'));
} else if (mode === 'http') {
  const [host, port, hostname] = args;
  const req = `GET /index.html HTTP/1.1\r\nHost: ${hostname}\r\nAccept: */*\r\nConnection: close\r\n\r\n`;
  const c = net.connect({ host, port: Number(port) }, () => c.write(req));
  let got = '';
  c.on('data', (d) => {
    got += d;
    if (got === req) {
      console.log('ok');
      c.destroy();
      process.exit(0);
    }
  });
  c.on('error', (e) => fail(e.message));
} else if (mode === 'dns') {
  const count = Number(args[0]);
  const prefix = args[1];
  const sock = dgram.createSocket('udp4');
  const waiting = new Map<number, () => void>();
  sock.on('message', (m) => {
    const id = m.readUInt16BE(0);
    waiting.get(id)?.();
    waiting.delete(id);
  });
  await new Promise<void>((r) => sock.bind(0, r));
  let next = 0;
  let answered = 0;
  const one = async (): Promise<void> => {
    while (next < count) {
      const i = next++;
      const id = i % 65536;
      const q = packet.encode({ type: 'query', id, flags: packet.RECURSION_DESIRED, questions: [{ type: 'A', name: `${prefix}-${i}.test` }] });
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`query ${i} not answered`)), 10_000);
        waiting.set(id, () => {
          clearTimeout(t);
          resolve();
        });
        sock.send(q, 53, '169.254.0.53');
      });
      answered++;
    }
  };
  try {
    await Promise.all(Array.from({ length: 16 }, one));
  } catch (e) {
    fail((e as Error).message);
  }
  console.log(`answered ${answered}`);
  process.exit(0);
} else {
  fail(`unknown mode ${mode}`);
}
