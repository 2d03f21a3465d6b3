/**
 * A stand-in FeOS node for the control plane's tests, built from the same protos as feosd: an ECDSA
 * P-256 key and CSRs made here, grpc-js clients of feos.fleet.v1 (JoinService over TLS without a client
 * certificate, NodeService with the node's), and node connections (TLS, ALPN feos-node/1, the node's
 * certificate) on which it serves a PodService stand-in through grpc-js's connection injector.
 */
import 'reflect-metadata';
import { createHash, webcrypto, X509Certificate } from 'node:crypto';
import tls from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import * as x509 from '@peculiar/x509';
import { create, type DescMethod, type DescService, type MessageInitShape, type MessageShape } from '@bufbuild/protobuf';
import { timestampNow } from '@bufbuild/protobuf/wkt';
import { addService, FeosError, serviceDefinition } from '../../src/feos/api/index.ts';
import { JoinService, NodeService, type JoinResponse } from '../../src/feos/gen/feos/fleet/v1/fleet_pb.js';
import { PodInfoSchema, PodService, PodState } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);
const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

/** A key pair and its PKCS#8 PEM. */
export interface NodeKey {
  keys: { publicKey: CryptoKey; privateKey: CryptoKey };
  keyPem: string;
}

/** Makes an ECDSA P-256 key. */
export async function makeKey(): Promise<NodeKey> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as unknown as { publicKey: CryptoKey; privateKey: CryptoKey };
  const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey as webcrypto.CryptoKey);
  return { keys, keyPem: x509.PemConverter.encode(pkcs8, 'PRIVATE KEY') };
}

/** A PKCS#10 CSR (PEM) for the key. */
export async function makeCsr(key: NodeKey, cn = 'feos-node'): Promise<string> {
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({ name: `CN=${cn}`, keys: key.keys, signingAlgorithm: ALG });
  return csr.toString('pem');
}

/** The pin of a CA certificate: hex SHA-256 of its DER SubjectPublicKeyInfo. */
export function pinOf(caPem: string): string {
  return createHash('sha256').update(new X509Certificate(caPem).publicKey.export({ type: 'spki', format: 'der' })).digest('hex');
}

type Unary<S extends DescService> = {
  [K in keyof S['method']]: S['method'][K] extends DescMethod
    ? (req: MessageInitShape<S['method'][K]['input']>) => Promise<MessageShape<S['method'][K]['output']>>
    : never;
};

/** A grpc-js unary client of a fleet service with TLS credentials, checking the server's URI as feosd does. */
function client<S extends DescService>(service: S, address: string, creds: grpc.ChannelCredentials): Unary<S> & { close(): void } {
  const Ctor = grpc.makeGenericClientConstructor(serviceDefinition(service), service.typeName);
  const raw = new Ctor(address, creds, { 'grpc.ssl_target_name_override': 'localhost', 'grpc.default_authority': 'localhost' });
  const out: Record<string, unknown> = { close: () => raw.close() };
  for (const m of service.methods) {
    const fn = (raw as unknown as Record<string, (...a: unknown[]) => unknown>)[m.localName]!.bind(raw);
    out[m.localName] = (req: unknown) =>
      new Promise((resolve, reject) => {
        fn(create(m.input, req as never), new grpc.Metadata(), { deadline: Date.now() + 20_000 }, (err: unknown, res: unknown) => (err ? reject(err) : resolve(res)));
      });
  }
  return out as Unary<S> & { close(): void };
}

/** The server certificate's SANs as the last handshake showed them (feosd's checks: the name and the one URI). */
export const seenServer: { subjectaltname?: string } = {};

function checkServer(host: string, cert: tls.PeerCertificate): Error | undefined {
  seenServer.subjectaltname = cert.subjectaltname;
  const uris = (cert.subjectaltname ?? '').split(/,\s*/).filter((s) => s.startsWith('URI:'));
  if (uris.length !== 1 || uris[0] !== 'URI:spiffe://feos.local/ferun') return new Error(`the server certificate does not carry exactly URI spiffe://feos.local/ferun: ${cert.subjectaltname}`);
  return tls.checkServerIdentity(host, cert);
}

/** Joins: the JoinService call with `tokenSecret` (`<id>-<secret>`), trusting `caPem`. */
export async function join(address: string, caPem: string, tokenSecret: string, nodeName: string, csrPem: string): Promise<JoinResponse> {
  const c = client(JoinService, address, grpc.credentials.createSsl(Buffer.from(caPem), null, null, { checkServerIdentity: checkServer }));
  try {
    return await c.join({ tokenSecret, nodeName, csrPem });
  } finally {
    c.close();
  }
}

/** The NodeService of a joined node: its key and chain. */
export function nodeService(address: string, caPem: string, key: NodeKey, chainPem: string): Unary<typeof NodeService> & { close(): void } {
  return client(NodeService, address, grpc.credentials.createSsl(Buffer.from(caPem), Buffer.from(key.keyPem), Buffer.from(chainPem), { checkServerIdentity: checkServer }));
}

/** A report as feosd sends one: 4 CPUs, 8 GiB, 3 allocatable vCPUs, 6 GiB, 16 pods. */
export function report(startId: string, hostname: string): MessageInitShape<typeof NodeService.method.report.input> {
  return {
    startId,
    collectedAt: timestampNow(),
    node: {
      hostname,
      kernelRelease: '6.1.0-test',
      bootId: 'b00710d0-0000-4000-8000-000000000001',
      feosdVersion: '0.1.0',
      accelerator: 'tcg',
      cpus: 4,
      memoryBytes: 8n * 1024n ** 3n,
      allocatableCpus: 3,
      allocatableMemoryBytes: 6n * 1024n ** 3n,
      maxPods: 16,
      guestVersions: ['1.0.0'],
      architecture: 'amd64',
      addresses: ['127.0.0.1'],
    },
    pods: [],
    podsStale: false,
  };
}

/** An open node connection, and the PodService stand-in it serves. */
export interface NodeConnection {
  socket: tls.TLSSocket;
  /** Resolves when the connection closed. */
  closed: Promise<void>;
  /** How many ListPods calls the stand-in answered. */
  calls: () => number;
  close(): void;
}

/**
 * Dials a node connection (ALPN feos-node/1, the node's certificate) and serves on it a PodService
 * whose ListPods answers one RUNNING pod `podId`, and whatever `more` adds to the server (a MeshService
 * stand-in: ./mesh-stand-in.ts).
 */
export async function dialNodeConnection(host: string, port: number, caPem: string, key: NodeKey, chainPem: string, podId: string, more?: (server: grpc.Server) => void): Promise<NodeConnection> {
  const server = new grpc.Server();
  more?.(server);
  let calls = 0;
  const unimplemented = async () => {
    throw new FeosError('UNIMPLEMENTED', 'not in the stand-in');
  };
  const handlers: Record<string, unknown> = {};
  for (const m of PodService.methods) handlers[m.localName] = unimplemented;
  handlers.listPods = async () => {
    calls++;
    return { pods: [create(PodInfoSchema, { id: podId, state: PodState.RUNNING })] };
  };
  // Two events of the pod, then the end of the stream (OK); for another pod FAILED_PRECONDITION after one.
  handlers.watchPodEvents = async (req: { podId: string }, send: (m: unknown) => boolean) => {
    send({ podId: podId, initial: true, pod: create(PodInfoSchema, { id: podId, state: PodState.PENDING }) });
    if (req.podId && req.podId !== podId) throw new FeosError('FAILED_PRECONDITION', `no pod ${req.podId} here`);
    send({ podId: podId, pod: create(PodInfoSchema, { id: podId, state: PodState.RUNNING }) });
  };
  addService(server, PodService, handlers as never);
  const socket = await new Promise<tls.TLSSocket>((resolve, reject) => {
    const s = tls.connect({ host, port, ca: caPem, key: key.keyPem, cert: chainPem, ALPNProtocols: ['feos-node/1'], servername: 'localhost', minVersion: 'TLSv1.3', checkServerIdentity: checkServer }, () => resolve(s));
    s.once('error', reject);
  });
  if (socket.alpnProtocol !== 'feos-node/1') throw new Error(`ALPN ${socket.alpnProtocol}`);
  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.on('error', () => {});
  injector.injectConnection(socket);
  return {
    socket,
    closed,
    calls: () => calls,
    close() {
      injector.destroy();
      socket.destroy();
      server.forceShutdown();
    },
  };
}
