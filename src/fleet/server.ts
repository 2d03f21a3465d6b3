/**
 * The port for nodes (docs/feos/fleet.md; seed 000, "The control plane"): one TLS 1.3 listener whose
 * ALPN picks the role of each connection.
 *
 * - `h2`: the uplink. The connection goes to a grpc-js server of `feos.fleet.v1` through its connection
 *   injector (insecure server credentials on top: the socket is TLS already). JoinService takes a
 *   connection without a client certificate; NodeService needs a certificate the cluster CA issued with
 *   one URI `spiffe://<td>/node/<name>`, and the node is the one it names, never one a message names.
 * - `feos-node/1`: a node connection. The node is the HTTP/2 server of its own API on it; the control
 *   plane opens an HTTP/2 client session over the accepted socket and keeps it in the pool by the
 *   node's name (./node-client.ts calls over it).
 *
 * The mesh (./mesh/): JoinMesh gives the node its /96 of the cluster's ULA, and every node connection
 * is sent the node's peers (MeshService) as nodes join, change and leave.
 *
 * Revocation: every NodeService call checks the node's Node and the serials it allows (./nodes.ts),
 * and a sweep every 2 s closes the node connections of nodes whose Node is gone or whose certificate
 * is no longer allowed.
 */
import { X509Certificate as NodeX509, constants as cryptoConstants } from 'node:crypto';
import http2 from 'node:http2';
import { hostname } from 'node:os';
import type { Duplex } from 'node:stream';
import tls from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { create, type DescMethod, type DescService, type MessageShape } from '@bufbuild/protobuf';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import { CoordinationV1Api, CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { type Logger, serviceDefinition } from '../lib/index.ts';
import { JoinService, NodeService } from '../feos/gen/feos/fleet/v1/fleet_pb.js';
import type { PodInfo } from '../feos/gen/feos/pod/v1/pod_pb.js';
import { Instances, type InstanceRecord } from './instances.ts';
import { FleetObjects, NodeNameTaken, NodeRevoked, NotAFeosNode, allowedSerials, isFeosNode } from './nodes.ts';
import { type ClusterCa, CsrError, issueNodeCertificate, issueServerCertificate, loadClusterCa, nodeOfCertificate, parseCsr } from './pki.ts';
import { TokenRefused, checkJoinToken } from './tokens.ts';
import { serveTunnel } from './tunnel.ts';
import { type Mesh, MeshArgumentError, MeshExhausted, MeshKeyTaken, startMesh } from './mesh/index.ts';

/** ALPN of the uplink and of node connections. */
export const ALPN_UPLINK = 'h2';
export const ALPN_NODE = 'feos-node/1';
/** Default report interval the control plane asks for, ms. */
export const DEFAULT_REPORT_INTERVAL_MS = 3000;
/** Default life of a node certificate, ms (24 h). */
export const DEFAULT_NODE_CERT_TTL_MS = 24 * 3600_000;

/** Options of {@link startFleetServer}. */
export interface FleetServerOptions {
  /** The admin (or a controller's) kubeconfig: the fleet is a client of the Kubernetes API. */
  kubeConfig: KubeConfig;
  /** The API server's data dir: its `pki/ca.crt` and `pki/ca.key` are the cluster CA. */
  dataDir: string;
  /** The address to listen on (`0.0.0.0`, `127.0.0.1`, `::`). */
  host: string;
  /** The port; 0 picks a free one. */
  port: number;
  /** Extra DNS names or addresses the server certificate names, beside localhost, this host's name and `host`. */
  serverNames?: string[];
  /** host:port nodes dial this instance at, for the instance list. @default host (or this host's name for an unspecified address) and the port */
  advertiseAddress?: string;
  /** The SPIFFE trust domain. @default feos.local */
  trustDomain?: string;
  /** Life of a node certificate, ms. @default 24 h */
  nodeCertTtlMs?: number;
  /** The report interval asked of nodes, ms. @default 3000 */
  reportIntervalMs?: number;
  /** How many nodes may hold a /96 of the mesh (`--feos-mesh-node-limit`). @default 1024 */
  meshNodeLimit?: number;
  /** This instance's name. @default <hostname>-<pid> */
  instanceName?: string;
  /** Sees each accepted report's pods (as the node's ListPods answered them; `stale` when they are its last answer). */
  onReport?(node: string, pods: readonly PodInfo[], stale: boolean): void;
  log: Logger;
}

/** A running port for nodes. */
export interface FleetServer {
  /** host:port it listens on (the port resolved). */
  address: string;
  port: number;
  /** The instance as nodes are told of it. */
  instance: InstanceRecord;
  /** The cluster CA's pin, for join tokens. */
  pin: string;
  /** The newest open node connection of `node`, or undefined. */
  nodeConnection(node: string): http2.ClientHttp2Session | undefined;
  /** How many node connections `node` holds with this instance. */
  nodeConnections(node: string): number;
  /**
   * Takes an upgraded node proxy socket for `node` (the API server's `setNodeTunnel`): HTTP/2 inside,
   * each stream forwarded to the node's newest node connection (./tunnel.ts).
   */
  tunnel(node: string, socket: Duplex, head: Buffer): void;
  /** Stops the listener, the uplink and the node connections, and deletes the instance's Lease. */
  close(): Promise<void>;
}

/** A gRPC error with a status code, as grpc-js takes it from a handler. */
class Status extends Error {
  readonly code: grpc.status;
  constructor(code: grpc.status, message: string) {
    super(message);
    this.code = code;
  }
}

/** Lowercase hex without leading zeros: Node.js and @peculiar/x509 write serials differently. */
function normSerial(s: string): string {
  return s.toLowerCase().replace(/:/g, '').replace(/^0+/, '');
}


type Handler = (req: never, call: grpc.ServerUnaryCall<unknown, unknown>) => Promise<unknown>;

function addUnaryService(server: grpc.Server, service: DescService, handlers: Record<string, Handler>, log: Logger): void {
  const impl: grpc.UntypedServiceImplementation = {};
  for (const m of service.methods as DescMethod[]) {
    const h = handlers[m.localName]!;
    impl[m.localName] = (call: grpc.ServerUnaryCall<unknown, unknown>, cb: grpc.sendUnaryData<unknown>) => {
      h(call.request as never, call).then(
        (res) => cb(null, create(m.output, res as never)),
        (err: unknown) => {
          if (err instanceof Status) {
            log.info({ method: m.name, code: grpc.status[err.code], err: err.message }, 'fleet call refused');
            cb({ code: err.code, details: err.message } as grpc.ServiceError);
          } else {
            const msg = err instanceof Error ? err.message : String(err);
            log.warn({ method: m.name, err: msg }, 'fleet call failed');
            cb({ code: grpc.status.UNAVAILABLE, details: `the control plane could not answer: ${msg}` } as grpc.ServiceError);
          }
        },
      );
    };
  }
  server.addService(serviceDefinition(service), impl);
}

/** The caller of a NodeService call: the node its verified certificate names, and that certificate. */
interface Caller {
  name: string;
  serial: string;
  spki: Buffer;
}

const NAME_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/**
 * Starts the port for nodes.
 * @throws Error when the cluster CA cannot be read or the port cannot be bound (its message)
 */
export async function startFleetServer(o: FleetServerOptions): Promise<FleetServer> {
  const log = o.log;
  const trustDomain = o.trustDomain ?? 'feos.local';
  const ttlMs = o.nodeCertTtlMs ?? DEFAULT_NODE_CERT_TTL_MS;
  const interval = o.reportIntervalMs ?? DEFAULT_REPORT_INTERVAL_MS;
  const ca: ClusterCa = await loadClusterCa(o.dataDir);
  const names = ['localhost', hostname(), '127.0.0.1', '::1', o.host, ...(o.serverNames ?? [])];
  const serverCert = await issueServerCertificate(ca, names, trustDomain);
  const core = o.kubeConfig.makeApiClient(CoreV1Api);
  const coord = o.kubeConfig.makeApiClient(CoordinationV1Api);
  const instanceName = o.instanceName ?? `${hostname()}-${process.pid}`.toLowerCase().replace(/[^a-z0-9-]/g, '-');
  const objects = new FleetObjects(core, coord, instanceName);

  // Node connections by node name; each with the serial of the certificate it was opened with.
  const pool = new Map<string, Map<http2.ClientHttp2Session, string>>();
  const sockets = new Set<tls.TLSSocket>();
  const tunnels = new Set<() => void>();

  const caller = (call: grpc.ServerUnaryCall<unknown, unknown>): Caller => {
    const peer = call.getAuthContext()?.sslPeerCertificate as tls.DetailedPeerCertificate | undefined;
    if (!peer?.raw) throw new Status(grpc.status.UNAUTHENTICATED, 'NodeService needs a node certificate of the cluster (mutual TLS); join first');
    const name = nodeOfCertificate(peer.subjectaltname, trustDomain);
    if (!name) throw new Status(grpc.status.UNAUTHENTICATED, `the client certificate is not a node's: want exactly one URI spiffe://${trustDomain}/node/<name>`);
    const spki = new NodeX509(peer.raw).publicKey.export({ type: 'spki', format: 'der' });
    return { name, serial: normSerial(peer.serialNumber), spki };
  };
  const checked = async <T>(fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (err: unknown) {
      if (err instanceof NodeRevoked) throw new Status(grpc.status.PERMISSION_DENIED, err.message);
      throw err;
    }
  };

  const server = new grpc.Server({ 'grpc.max_receive_message_length': 16 * 1024 * 1024 });
  let instances: Instances;
  const newest = (node: string) => {
    const s = [...(pool.get(node)?.keys() ?? [])].filter((x) => !x.closed && !x.destroyed);
    return s.at(-1);
  };
  // The mesh (./mesh/): JoinMesh's answers and the peers sent over the node connections.
  const mesh: Mesh = await startMesh({ kubeConfig: o.kubeConfig, nodeLimit: o.meshNodeLimit, connection: newest, log: log.child({ part: 'mesh' }) });
  const instanceList = async () => (await instances.list()).map((i) => ({ name: i.name, address: i.address }));

  addUnaryService(
    server,
    JoinService,
    {
      join: async (req: MessageShape<typeof JoinService.method.join.input>) => {
        try {
          await checkJoinToken(core, req.tokenSecret);
        } catch (err: unknown) {
          if (err instanceof TokenRefused) {
            log.warn({ node: req.nodeName, reason: err.message }, 'join refused');
            throw new Status(grpc.status.PERMISSION_DENIED, 'the join token is not valid (unknown, expired, deleted or wrong): ask the cluster admin for a new one (kube32-cli feos token create)');
          }
          throw err;
        }
        if (!NAME_RE.test(req.nodeName) || req.nodeName.length > 253) {
          throw new Status(grpc.status.INVALID_ARGUMENT, `node_name ${JSON.stringify(req.nodeName)} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)`);
        }
        let csr: Awaited<ReturnType<typeof parseCsr>>['csr'];
        try {
          csr = (await parseCsr(req.csrPem)).csr;
        } catch (err: unknown) {
          if (err instanceof CsrError) throw new Status(grpc.status.INVALID_ARGUMENT, err.message);
          throw err;
        }
        const cert = await issueNodeCertificate(ca, csr, req.nodeName, trustDomain, ttlMs);
        try {
          await objects.registerNode(req.nodeName, normSerial(cert.serial));
        } catch (err: unknown) {
          if (err instanceof NotAFeosNode) throw new Status(grpc.status.ALREADY_EXISTS, err.message);
          if (err instanceof NodeNameTaken) {
            log.warn({ node: req.nodeName }, 'join refused: a Ready node has the name');
            throw new Status(grpc.status.ALREADY_EXISTS, err.message);
          }
          throw err;
        }
        log.info({ node: req.nodeName, serial: cert.serial, notAfter: cert.notAfter.toISOString() }, 'node joined');
        return {
          chainPem: cert.chainPem,
          trustBundlePem: ca.certPem,
          spiffeId: `spiffe://${trustDomain}/node/${req.nodeName}`,
          notAfter: timestampFromDate(cert.notAfter),
          renewAt: timestampFromDate(cert.renewAt),
          instances: await instanceList(),
        };
      },
    },
    log,
  );

  addUnaryService(
    server,
    NodeService,
    {
      report: async (req: MessageShape<typeof NodeService.method.report.input>, call) => {
        const c = caller(call);
        await checked(() => objects.report(c.name, c.serial, req.node, req.pods.length));
        o.onReport?.(c.name, req.pods, req.podsStale);
        return { reportIntervalMs: interval, instances: await instanceList() };
      },
      sendEvents: async (req: MessageShape<typeof NodeService.method.sendEvents.input>, call) => {
        const c = caller(call);
        const node = await checked(() => objects.checkNode(c.name, c.serial));
        if (req.dropped > 0n) log.warn({ node: c.name, startId: req.startId, dropped: String(req.dropped) }, 'the node dropped events (its buffer was full)');
        const acknowledged = await objects.recordEvents(node, req.startId, req.events);
        return { acknowledged };
      },
      renew: async (req: MessageShape<typeof NodeService.method.renew.input>, call) => {
        const c = caller(call);
        await checked(() => objects.checkNode(c.name, c.serial));
        let parsed: Awaited<ReturnType<typeof parseCsr>>;
        try {
          parsed = await parseCsr(req.csrPem);
        } catch (err: unknown) {
          if (err instanceof CsrError) throw new Status(grpc.status.INVALID_ARGUMENT, err.message);
          throw err;
        }
        if (!parsed.spki.equals(c.spki)) throw new Status(grpc.status.INVALID_ARGUMENT, "csr_pem names another key than the node's certificate: a renewal keeps the key");
        const cert = await issueNodeCertificate(ca, parsed.csr, c.name, trustDomain, ttlMs);
        await checked(() => objects.renewed(c.name, c.serial, normSerial(cert.serial)));
        log.info({ node: c.name, serial: cert.serial, notAfter: cert.notAfter.toISOString() }, 'node certificate renewed');
        return { chainPem: cert.chainPem, trustBundlePem: ca.certPem, notAfter: timestampFromDate(cert.notAfter), renewAt: timestampFromDate(cert.renewAt) };
      },
      stopping: async (req: MessageShape<typeof NodeService.method.stopping.input>, call) => {
        const c = caller(call);
        await checked(() => objects.stopping(c.name, c.serial, req.message));
        log.info({ node: c.name, startId: req.startId, message: req.message }, 'node stopping');
        return {};
      },
      joinMesh: async (req: MessageShape<typeof NodeService.method.joinMesh.input>, call) => {
        const c = caller(call);
        const node = await checked(() => objects.checkNode(c.name, c.serial));
        try {
          return await mesh.join(node, req.publicKey, req.endpoint);
        } catch (err: unknown) {
          if (err instanceof MeshArgumentError) throw new Status(grpc.status.INVALID_ARGUMENT, err.message);
          if (err instanceof MeshExhausted) throw new Status(grpc.status.RESOURCE_EXHAUSTED, err.message);
          if (err instanceof MeshKeyTaken) throw new Status(grpc.status.ALREADY_EXISTS, err.message);
          throw err;
        }
      },
    },
    log,
  );
  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());

  const addNodeConnection = async (socket: tls.TLSSocket): Promise<void> => {
    const peer = socket.getPeerCertificate(true);
    const name = socket.authorized && peer?.raw ? nodeOfCertificate(peer.subjectaltname, trustDomain) : undefined;
    if (!name) {
      log.warn({ remote: socket.remoteAddress, err: socket.authorizationError }, 'node connection without a node certificate: closed');
      socket.destroy();
      return;
    }
    const serial = normSerial(peer.serialNumber);
    try {
      await objects.checkNode(name, serial);
    } catch (err: unknown) {
      log.warn({ node: name, err: err instanceof Error ? err.message : String(err) }, 'node connection refused');
      socket.destroy();
      return;
    }
    const session = http2.connect(`https://${name}`, { createConnection: () => socket, peerMaxConcurrentStreams: 1024 });
    const set = pool.get(name) ?? new Map<http2.ClientHttp2Session, string>();
    pool.set(name, set);
    set.set(session, serial);
    log.info({ node: name, remote: `${socket.remoteAddress}:${socket.remotePort}` }, 'node connection open');
    session.on('error', (err) => log.info({ node: name, err: err.message }, 'node connection failed'));
    session.once('close', () => {
      pool.get(name)?.delete(session);
      if (pool.get(name)?.size === 0) {
        pool.delete(name);
        mesh.disconnected(name);
      }
      log.info({ node: name }, 'node connection closed');
    });
    mesh.connected(name);
    // A ping every 10 s: a connection that stops answering is seen as gone.
    const ping = setInterval(() => {
      if (!session.closed) session.ping(() => {});
    }, 10_000);
    ping.unref();
    session.once('close', () => clearInterval(ping));
  };

  const tlsServer = tls.createServer({
    key: serverCert.keyPem,
    cert: serverCert.chainPem,
    ca: [ca.certPem],
    requestCert: true,
    rejectUnauthorized: false,
    minVersion: 'TLSv1.3',
    maxVersion: 'TLSv1.3',
    ALPNProtocols: [ALPN_UPLINK, ALPN_NODE],
    // No session resumption (docs/feos/fleet.md): no tickets, no session cache.
    secureOptions: cryptoConstants.SSL_OP_NO_TICKET,
    sessionTimeout: 0,
  });
  tlsServer.on('secureConnection', (socket: tls.TLSSocket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    socket.setKeepAlive(true, 10_000);
    socket.setNoDelay(true);
    socket.on('error', () => {});
    if (socket.alpnProtocol === ALPN_UPLINK) injector.injectConnection(socket);
    else if (socket.alpnProtocol === ALPN_NODE) void addNodeConnection(socket);
    else {
      log.warn({ remote: socket.remoteAddress, alpn: socket.alpnProtocol }, `connection without ALPN ${ALPN_UPLINK} or ${ALPN_NODE}: closed`);
      socket.destroy();
    }
  });
  tlsServer.on('tlsClientError', (err) => log.debug({ err: err.message }, 'TLS handshake failed'));
  try {
    await new Promise<void>((resolve, reject) => {
      tlsServer.once('error', reject);
      tlsServer.listen(o.port, o.host, () => {
        tlsServer.off('error', reject);
        resolve();
      });
    });
  } catch (err: unknown) {
    await mesh.close();
    throw err;
  }
  const port = (tlsServer.address() as { port: number }).port;
  const shownHost = o.host.includes(':') ? `[${o.host}]` : o.host;
  const unspecified = o.host === '0.0.0.0' || o.host === '::';
  const advertise = o.advertiseAddress ?? `${unspecified ? hostname() : shownHost}:${port}`;
  instances = new Instances(coord, { name: instanceName, address: advertise }, (err) => log.warn({ err: err instanceof Error ? err.message : String(err) }, 'instance lease'));
  await instances.start();

  // The revocation sweep: close node connections of nodes removed or whose certificate was replaced.
  const sweep = setInterval(() => {
    if (pool.size === 0) return;
    core.listNode({ labelSelector: 'kube32.io/runtime=feos' }).then(
      (list) => {
        const nodes = new Map(list.items.filter(isFeosNode).map((n) => [n.metadata?.name ?? '', allowedSerials(n)]));
        for (const [name, sessions] of pool) {
          const allowed = nodes.get(name);
          for (const [session, serial] of sessions) {
            if (allowed?.includes(serial)) continue;
            log.info({ node: name }, allowed ? 'node certificate revoked: closing its node connection' : 'node removed: closing its node connections');
            session.destroy();
          }
        }
      },
      (err: unknown) => log.warn({ err: err instanceof Error ? err.message : String(err) }, 'revocation sweep failed'),
    );
  }, 2000);
  sweep.unref();

  log.info({ address: `${shownHost}:${port}`, advertise, trustDomain, pin: ca.pin }, 'port for FeOS nodes listening');
  return {
    address: `${shownHost}:${port}`,
    port,
    instance: instances.self,
    pin: ca.pin,
    nodeConnection: newest,
    tunnel(node, socket, head) {
      const close = serveTunnel(socket, head, node, () => newest(node));
      tunnels.add(close);
      socket.once('close', () => tunnels.delete(close));
    },
    nodeConnections: (node) => [...(pool.get(node)?.keys() ?? [])].filter((x) => !x.closed && !x.destroyed).length,
    async close() {
      clearInterval(sweep);
      await mesh.close();
      await new Promise<void>((resolve) => {
        tlsServer.close(() => resolve());
        for (const sessions of pool.values()) for (const s of sessions.keys()) s.destroy();
        injector.destroy();
        server.forceShutdown();
        for (const s of sockets) s.destroy();
        for (const close of tunnels) close();
      });
      await instances.stop();
    },
  };
}
