// A stand-in of the control plane's port for nodes, for the fleet suites: TLS 1.3 with a CA made here,
// ALPN h2 (feos.fleet.v1 served by grpc-js through a connection injector, every call recorded) and
// feos-node/1 (the stand-in is the HTTP/2 client of feosd's API over the connection feosd dialed).
import 'reflect-metadata';
import { createHash, randomBytes, webcrypto, X509Certificate } from 'node:crypto';
import http2 from 'node:http2';
import tls from 'node:tls';
import type { AddressInfo } from 'node:net';
import * as x509 from '@peculiar/x509';
import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape, type MessageShape } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import * as grpc from '@grpc/grpc-js';
import { JoinService, NodeService } from '../../src/feos/gen/feos/fleet/v1/fleet_pb.js';
import { serviceDefinition } from '../../src/feos/api/index.ts';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);
const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
type Keys = { publicKey: CryptoKey; privateKey: CryptoKey };
const genKeys = async () => (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as unknown as Keys;
const keyPem = async (k: CryptoKey) => x509.PemConverter.encode(await webcrypto.subtle.exportKey('pkcs8', k as webcrypto.CryptoKey), 'PRIVATE KEY');

/** A CA made in the test. */
export interface TestCa {
  cert: x509.X509Certificate;
  keys: Keys;
  pem: string;
  /** The pin of its key, as a join token carries it. */
  pin: string;
}

export async function makeCa(cn = 'test-ca'): Promise<TestCa> {
  const keys = await genKeys();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomBytes(8).toString('hex'),
    name: `CN=${cn}`,
    notBefore: new Date(Date.now() - 3600_000),
    notAfter: new Date(Date.now() + 86400_000),
    keys,
    signingAlgorithm: ALG,
    extensions: [new x509.BasicConstraintsExtension(true, undefined, true), new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.digitalSignature, true)],
  });
  const pem = `${cert.toString('pem')}\n`;
  const pin = createHash('sha256')
    .update(new X509Certificate(pem).publicKey.export({ type: 'spki', format: 'der' }))
    .digest('hex');
  return { cert, keys, pem, pin };
}

/** A server certificate of `ca` with the given SANs. */
export async function serverCert(ca: TestCa, sans: { dns?: string[]; ip?: string[]; uri?: string[] }): Promise<{ certPem: string; keyPem: string }> {
  const keys = await genKeys();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: randomBytes(8).toString('hex'),
    subject: 'CN=ferun',
    issuer: ca.cert.subject,
    notBefore: new Date(Date.now() - 3600_000),
    notAfter: new Date(Date.now() + 86400_000),
    publicKey: keys.publicKey,
    signingKey: ca.keys.privateKey,
    signingAlgorithm: ALG,
    extensions: [
      new x509.SubjectAlternativeNameExtension([
        ...(sans.dns ?? []).map((v) => ({ type: 'dns' as const, value: v })),
        ...(sans.ip ?? []).map((v) => ({ type: 'ip' as const, value: v })),
        ...(sans.uri ?? []).map((v) => ({ type: 'url' as const, value: v })),
      ]),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
    ],
  });
  return { certPem: `${cert.toString('pem')}\n`, keyPem: await keyPem(keys.privateKey) };
}

/** Issues a node certificate for a CSR (PEM), valid `ttlMs`. */
export async function issueNodeCert(ca: TestCa, csrPem: string, uri: string, ttlMs: number): Promise<{ pem: string; notAfter: Date }> {
  const csr = new x509.Pkcs10CertificateRequest(csrPem);
  const notAfter = new Date(Date.now() + ttlMs);
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: randomBytes(8).toString('hex'),
    subject: csr.subject,
    issuer: ca.cert.subject,
    notBefore: new Date(Date.now() - 60_000),
    notAfter,
    publicKey: await csr.publicKey.export(ALG, ['verify']),
    signingKey: ca.keys.privateKey,
    signingAlgorithm: ALG,
    extensions: [new x509.SubjectAlternativeNameExtension([{ type: 'url', value: uri }]), new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.clientAuth])],
  });
  return { pem: `${cert.toString('pem')}\n`, notAfter };
}

/** A call the stand-in got. */
export interface RecordedCall {
  method: string;
  request: unknown;
  /** The client certificate's serial, if any. */
  peerSerial?: string;
  at: number;
}

/** A gRPC failure the stand-in answers. */
export class Refuse extends Error {
  readonly code: number;
  constructor(code: number, message: string) {
    super(message);
    this.code = code;
  }
}

type Handler = (req: never, peer?: X509Certificate) => Promise<unknown> | unknown;

/** The stand-in control plane. */
export interface StandIn {
  port: number;
  address: string;
  calls: RecordedCall[];
  /** Every TLS connection's ALPN and client certificate serial, in order. */
  connections: { alpn: string; peerSerial?: string; at: number }[];
  /** The node connections (feos-node/1) as HTTP/2 client sessions, newest last. */
  nodeSessions: http2.ClientHttp2Session[];
  handlers: Record<string, Handler>;
  close(): Promise<void>;
}

const services = [JoinService, NodeService];

/**
 * Starts a stand-in on `host` (127.0.0.1; a veth's address for a feosd in a namespace) with `cert` (sent
 * with the CA's certificate after it, as the port for nodes does) and the given handlers (method name ->
 * handler; a handler throws Refuse to fail a call).
 */
export async function startStandIn(ca: TestCa, cert: { certPem: string; keyPem: string }, handlers: Record<string, Handler>, port = 0, host = '127.0.0.1'): Promise<StandIn> {
  const calls: RecordedCall[] = [];
  const connections: StandIn['connections'] = [];
  const nodeSessions: http2.ClientHttp2Session[] = [];
  const sockets = new Set<tls.TLSSocket>();
  // The uplink as the control plane serves it: grpc-js over the TLS connection (insecure credentials on
  // top), the caller's certificate from the call's auth context.
  const grpcServer = new grpc.Server();
  const st: Partial<StandIn> = { calls, connections, nodeSessions, handlers };
  for (const service of services) {
    const impl: grpc.UntypedServiceImplementation = {};
    for (const m of service.methods) {
      impl[m.localName] = (call: grpc.ServerUnaryCall<unknown, unknown>, cb: grpc.sendUnaryData<unknown>) => {
        const raw = (call.getAuthContext()?.sslPeerCertificate as tls.PeerCertificate | undefined)?.raw;
        const peer = raw ? new X509Certificate(raw) : undefined;
        calls.push({ method: m.name, request: call.request, peerSerial: peer?.serialNumber, at: Date.now() });
        const h = st.handlers![m.name];
        Promise.resolve()
          .then(() => {
            if (!h) throw new Refuse(12, `${m.name} not served by the stand-in`);
            return h(call.request as never, peer);
          })
          .then(
            (out) => cb(null, create(m.output, out as never)),
            (err: unknown) => cb({ code: err instanceof Refuse ? err.code : 2, details: (err as Error).message } as grpc.ServiceError),
          );
      };
    }
    grpcServer.addService(serviceDefinition(service), impl);
  }
  const injector = grpcServer.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  const server = tls.createServer(
    {
      key: cert.keyPem,
      cert: cert.certPem + ca.pem,
      ca: [ca.pem],
      requestCert: true,
      rejectUnauthorized: false,
      ALPNProtocols: ['h2', 'feos-node/1'],
      minVersion: 'TLSv1.3',
    },
    (socket) => {
      sockets.add(socket);
      socket.once('close', () => sockets.delete(socket));
      socket.on('error', () => {});
      const raw = socket.getPeerCertificate()?.raw;
      connections.push({ alpn: String(socket.alpnProtocol), peerSerial: raw ? new X509Certificate(raw).serialNumber : undefined, at: Date.now() });
      if (socket.alpnProtocol === 'h2') injector.injectConnection(socket);
      else if (socket.alpnProtocol === 'feos-node/1') {
        const s = http2.connect('https://feos-node', { createConnection: () => socket });
        s.on('error', () => {});
        nodeSessions.push(s);
      } else socket.destroy();
    },
  );
  server.on('tlsClientError', () => {});
  await new Promise<void>((r) => server.listen(port, host, () => r()));
  const bound = (server.address() as AddressInfo).port;
  return Object.assign(st, {
    port: bound,
    address: `${host}:${bound}`,
    close: async () => {
      for (const s of nodeSessions) s.destroy();
      for (const s of sockets) s.destroy();
      injector.destroy();
      grpcServer.forceShutdown();
      await new Promise<void>((r) => server.close(() => r()));
    },
  }) as StandIn;
}

/** Handlers of a control plane that takes `secret` and issues certificates for `ttlMs`. */
export function joiningHandlers(ca: TestCa, o: { secret: string; ttlMs?: number; renewAfterMs?: number; reportIntervalMs?: number; instances?: { name: string; address: string }[] }) {
  const ttl = o.ttlMs ?? 86400_000;
  const renewAt = () => new Date(Date.now() + (o.renewAfterMs ?? (ttl * 2) / 3));
  return {
    Join: async (req: { tokenSecret: string; nodeName: string; csrPem: string }) => {
      if (req.tokenSecret !== o.secret) throw new Refuse(7, 'the join token is not known');
      const c = await issueNodeCert(ca, req.csrPem, `spiffe://feos.local/node/${req.nodeName}`, ttl);
      return {
        chainPem: c.pem + ca.pem,
        trustBundlePem: ca.pem,
        spiffeId: `spiffe://feos.local/node/${req.nodeName}`,
        notAfter: timestampFromDate(c.notAfter),
        renewAt: timestampFromDate(renewAt()),
        instances: o.instances ?? [],
      };
    },
    Report: () => ({ reportIntervalMs: o.reportIntervalMs ?? 0 }),
    SendEvents: (req: { events: { sequence: bigint }[] }) => ({ acknowledged: req.events.at(-1)?.sequence ?? 0n }),
    Stopping: () => ({}),
    Renew: async (req: { csrPem: string }, peer?: X509Certificate) => {
      const uri = /URI:([^,]+)/.exec(peer?.subjectAltName ?? '')?.[1] ?? '';
      const c = await issueNodeCert(ca, req.csrPem, uri, ttl);
      return { chainPem: c.pem + ca.pem, trustBundlePem: ca.pem, notAfter: timestampFromDate(c.notAfter), renewAt: timestampFromDate(renewAt()) };
    },
  };
}

/** A gRPC frame of a message. */
function frame<I extends DescMessage>(schema: I, msg: MessageInitShape<I>): Buffer {
  const body = Buffer.from(toBinary(schema, create(schema, msg)));
  const f = Buffer.alloc(5);
  f.writeUInt32BE(body.length, 1);
  return Buffer.concat([f, body]);
}

/** A server stream the stand-in calls on a node connection: its messages as they come, and its end. */
export function callStream<I extends DescMessage, O extends DescMessage>(
  session: http2.ClientHttp2Session,
  path: string,
  input: I,
  output: O,
  req: MessageInitShape<I>,
): { messages: MessageShape<O>[]; ended: Promise<{ status: string; message: string; at: number }> } {
  const stream = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers' });
  const messages: MessageShape<O>[] = [];
  let buf = Buffer.alloc(0);
  stream.on('data', (c: Buffer) => {
    buf = Buffer.concat([buf, c]);
    while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
      const n = buf.readUInt32BE(1);
      messages.push(fromBinary(output, buf.subarray(5, 5 + n)));
      buf = buf.subarray(5 + n);
    }
  });
  let status = '';
  let message = '';
  const take = (h: http2.IncomingHttpHeaders) => {
    if (h['grpc-status'] !== undefined) {
      status = String(h['grpc-status']);
      message = decodeURIComponent(String(h['grpc-message'] ?? ''));
    }
  };
  stream.on('response', take);
  stream.on('trailers', take);
  const ended = new Promise<{ status: string; message: string; at: number }>((resolve) => {
    stream.on('error', () => {});
    stream.on('close', () => resolve({ status: status || `closed without status (rst ${stream.rstCode})`, message, at: Date.now() }));
  });
  stream.end(frame(input, req));
  return { messages, ended };
}

/** A join token for `secret` pinned to `ca`. */
export function joinToken(secret: string, ca: TestCa): string {
  return `feos-join-${secret}.${ca.pin}\n`;
}
