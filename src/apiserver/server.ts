/**
 * `createApiServer`: the API server in one call. It opens the store (SQLite in the data dir, or
 * memory for tests), makes sure the system namespaces exist, sets up the CA, serving certificate
 * and admin kubeconfig (HTTPS), or plain HTTP on loopback when asked, and serves every request
 * through one dispatcher: health and metrics, discovery and OpenAPI, TokenReview, blobs, then the
 * resources. Every error is answered as a `metav1.Status`; every request is logged once at debug
 * level and counted.
 */

import { randomBytes, randomUUID } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { type AddressInfo, createServer as createNetServer, type Server as NetServer } from 'node:net';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { createLogger, type Logger, writeFileAtomicSync } from '../lib/index.ts';
import { reconcileBootstrapPolicy } from './auth/policy.ts';
import { RootCaPublisher } from './auth/root-ca.ts';
import { checkTokenBinding } from './auth/tokens.ts';
import { advertiseAddressOf, bootstrap, ensureKubernetesService } from './bootstrap.ts';
import { attachCheckpointDataPeers } from './checkpoint-data-peers.ts';
import { joinClusterIdentity } from './cluster-identity.ts';
import { createDispatcher } from './dispatch.ts';
import { createAuthorizer } from './handlers/auth.ts';
import type { ServerContext, UserInfo } from './handlers/context.ts';
import { DEFAULT_MAX_MODULE_BYTES } from './handlers/data.ts';
import { destroyAll, FeosPodIndex, type FeosPodStreams, isFeosPodUpgrade, serveFeosPodUpgrade } from './handlers/feos-pods.ts';
import { healthChecks } from './handlers/health.ts';
import { DEFAULT_MAX_BODY_BYTES } from './handlers/http.ts';
import { isNodeTunnelUpgrade, type NodeTunnel, serveNodeTunnel } from './handlers/node-tunnel.ts';
import { createMetrics } from './metrics.ts';
import { ADMIN_USER, APISERVER_USER, adminKubeconfigPath, ensureServingPki, kubeconfigYaml, mintToken, mintTokenWithKey, TokenAuthenticator, type TokenClaims, type TokenUser, tokenKeyOf } from './pki.ts';
import { CheckpointDataStore, DEFAULT_CHECKPOINT_DATA_BYTES } from './registry/checkpoints/data-store.ts';
import { checkpoints } from './registry/checkpoints/index.ts';
import { GarbageCollector } from './registry/gc.ts';
import { resolvePodImage } from './registry/modules/images.ts';
import { admitLimitRanges, admitQuota, QuotaNamespaces } from './registry/quota/index.ts';
import { admitRuntimeClass } from './registry/runtimeclasses/admission.ts';
import { Registry } from './registry/store.ts';
import { EtcdStorage } from './storage/etcd.ts';
import { MemoryStorage, SqliteStorage, type Storage } from './storage/index.ts';
import { DEFAULT_WATCH_WINDOW } from './storage/base.ts';
import { Cacher, DEFAULT_CACHE_WINDOW } from './storage/cacher.ts';

/** Options of `createApiServer`. */
export interface ApiServerOptions {
  /** Directory of the database, the PKI and the admin kubeconfig; required unless `storage` is `memory`. */
  dataDir?: string;
  /** TCP port; 0 picks a free one. @default 0 */
  port?: number;
  /** Address to listen on. @default '127.0.0.1' */
  bindAddress?: string;
  /**
   * The IP address other API servers and the `default/kubernetes` Endpoints use for this one (also in its
   * serving certificate). @default the bind address, or this host's first non-internal address when it is 0.0.0.0 or ::
   */
  advertiseAddress?: string;
  /**
   * Listen on `port` with `SO_REUSEPORT` (Node's `reusePort`, Linux): several API server processes of one
   * cluster on one etcd then share the port, and the kernel spreads new connections among them. @default false
   */
  reusePort?: boolean;
  /**
   * A port of this server's own on the bind address, where the other API servers reach it (the
   * checkpoint-data peers' URL, as kube-apiserver's `--peer-advertise-port`): with `reusePort` the shared
   * `port` may lead to another process. It serves every request as `port` does. 0 picks a free one.
   * @default none: the peers reach this server at `port`
   */
  peerPort?: number;
  /** With `storage: 'etcd'`: duration of this server's identity Lease, s (a killed server leaves the Endpoints within it). @default 30 */
  identityLeaseDurationSeconds?: number;
  /** `sqlite` (default, `<data-dir>/kube32.db`) or `memory` (tests only: nothing survives). */
  storage?: 'sqlite' | 'memory' | 'etcd';
  /** With `storage: 'etcd'`: the etcd client URLs (`http://127.0.0.1:2379`); see docs/etcd.md. */
  etcdEndpoints?: string[];
  /** Serve plain HTTP (only allowed on a loopback address); requests without a token are the admin's. @default false */
  insecureHttp?: boolean;
  /** Bytes of checkpoint data kept in memory. @default 16777216 (16 MiB) */
  checkpointDataBytes?: number;
  /** Limit of a request body in bytes. @default 3145728 (3 MiB) */
  maxBodyBytes?: number;
  /** Limit of a module upload in bytes. @default 67108864 (64 MiB) */
  maxModuleBytes?: number;
  /** Interval of watch bookmarks / keep-alive newlines, ms. @default 10000 */
  watchHeartbeatMs?: number;
  /** Events kept for watch resumption (the store's window; the watch cache keeps as many per resource, at most 10 000). @default 50000 */
  watchWindow?: number;
  /** Bytes a watcher may leave unsent before it is ended as too slow (its client watches again). @default 8388608 (8 MiB) */
  watchBufferBytes?: number;
  /** A core event is deleted this long after its last write (registry/event-expiry.ts), ms; 0 keeps them. @default 3600000 (1 h) */
  eventTtlMs?: number;
  /** Extra names or addresses for the serving certificate. */
  certificateSans?: string[];
  /**
   * Time a connection has to send a request's whole header, ms; one that has not is answered 408 and
   * closed (Node's `headersTimeout`, checked every `min(1 s, this / 4)`). kube-apiserver's `ReadHeaderTimeout` is 32 s.
   * @default 32000
   */
  headersTimeoutMs?: number;
  logger?: Logger;
}

/** A running API server. */
export interface ApiServer {
  /** `https://127.0.0.1:PORT` (or http://). */
  url: string;
  port: number;
  /** The port of this server alone (`peerPort`), once bound; undefined without one. */
  peerPort: number | undefined;
  /** The admin kubeconfig's path (undefined with memory storage and no data dir). */
  kubeconfigPath: string | undefined;
  /** The admin's bearer token. */
  adminToken: string;
  /** PEM of the CA (undefined for plain HTTP). */
  caCertPem: string | undefined;
  registry: Registry;
  /** Registers (or, undefined, removes) what takes FeOS nodes' node proxy tunnels (handlers/node-tunnel.ts). */
  setNodeTunnel(tunnel: NodeTunnel | undefined): void;
  /** Registers (or, undefined, removes) the streams of FeOS pods (logs, exec, port-forward; handlers/feos-pods.ts). */
  setFeosPodStreams(streams: FeosPodStreams | undefined): void;
  /** Stops listening, ends open streams, closes the store. */
  close(): Promise<void>;
}

function isLoopback(addr: string): boolean {
  return addr === 'localhost' || addr === '::1' || /^127\./.test(addr);
}

/** The options checked: the bind address, the store's kind, the body limit. @throws RangeError as {@link createApiServer} says */
function checkOptions(opts: ApiServerOptions): { bind: string; kind: 'sqlite' | 'memory' | 'etcd'; maxBodyBytes: number } {
  const bind = opts.bindAddress ?? '127.0.0.1';
  const kind = opts.storage ?? 'sqlite';
  if (opts.insecureHttp && !isLoopback(bind)) throw new RangeError(`plain HTTP is only allowed on a loopback address: current bind address is ${bind}`);
  if (kind === 'sqlite' && !opts.dataDir) throw new RangeError('the sqlite storage needs a data dir (--data-dir)');
  if (!opts.insecureHttp && !opts.dataDir) throw new RangeError('HTTPS needs a data dir for its certificate authority (--data-dir), or use plain HTTP on loopback');
  const maxBodyBytes = opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  if (!Number.isSafeInteger(maxBodyBytes) || maxBodyBytes <= 0) throw new RangeError(`maxBodyBytes must be a positive integer: current value is ${maxBodyBytes}`);
  const ht = opts.headersTimeoutMs;
  if (ht !== undefined && (!Number.isInteger(ht) || ht < 100)) throw new RangeError(`headersTimeoutMs must be an integer of at least 100: current value is ${ht}`);
  const leaseSeconds = opts.identityLeaseDurationSeconds;
  const pp = opts.peerPort;
  if (pp !== undefined && (!Number.isInteger(pp) || pp < 0 || pp > 65535)) throw new RangeError(`peerPort must be a TCP port (0-65535): current value is ${pp}`);
  if (leaseSeconds !== undefined && (!Number.isInteger(leaseSeconds) || leaseSeconds < 3 || leaseSeconds > 3600)) throw new RangeError(`identityLeaseDurationSeconds must be an integer of 3 to 3600: current value is ${leaseSeconds}`);
  return { bind, kind, maxBodyBytes };
}

/** The store of `kind`: etcd, memory, or `<data-dir>/kube32.db`. */
async function openStorage(opts: ApiServerOptions, kind: 'sqlite' | 'memory' | 'etcd'): Promise<Storage> {
  if (kind === 'etcd') return EtcdStorage.open({ endpoints: opts.etcdEndpoints ?? [], watchWindow: opts.watchWindow });
  if (kind === 'memory') return new MemoryStorage({ watchWindow: opts.watchWindow });
  return new SqliteStorage(join(opts.dataDir!, 'kube32.db'), { watchWindow: opts.watchWindow });
}

/**
 * The tokens of the admin and of the API server itself (toward kubelets), the authenticator of bearer
 * tokens and the minting of bound tokens (TokenRequest). Without a data dir (plain HTTP, memory store)
 * the signing key lives in memory: the two fixed tokens and the bound tokens of this run are the only ones.
 */
function tokens(dataDir: string | undefined): { adminToken: string; kubeletToken: string; verifyToken(t: string): TokenUser | undefined; mint(user: UserInfo, claims: TokenClaims): string } {
  const key = dataDir ? tokenKeyOf(dataDir) : randomBytes(32);
  const signed = new TokenAuthenticator(key);
  const adminToken = dataDir ? mintToken(dataDir, ADMIN_USER) : 'insecure-admin';
  const kubeletToken = dataDir ? mintToken(dataDir, APISERVER_USER) : 'insecure-apiserver';
  const verifyToken = (t: string): TokenUser | undefined => {
    if (!dataDir && t === adminToken) return ADMIN_USER;
    if (!dataDir && t === kubeletToken) return APISERVER_USER;
    return signed.authenticate(t);
  };
  return { adminToken, kubeletToken, verifyToken, mint: (user, claims) => mintTokenWithKey(key, user, claims) };
}

/** kube-apiserver's `ReadHeaderTimeout` (32 s), ms. */
export const DEFAULT_HEADERS_TIMEOUT_MS = 32_000;

/** The HTTP(S) server of `handler`, not yet listening; HTTPS with the cluster's serving certificate. */
async function httpServer(opts: ApiServerOptions, bind: string, advertise: string, handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ server: Server; caCertPem: string | undefined }> {
  let server: Server;
  let caCertPem: string | undefined;
  const headersTimeout = opts.headersTimeoutMs ?? DEFAULT_HEADERS_TIMEOUT_MS;
  // Node checks the header deadline of open connections at this interval (30 s by default, which would double the wait).
  const connectionsCheckingInterval = Math.max(50, Math.min(1000, Math.floor(headersTimeout / 4)));
  if (opts.insecureHttp) {
    server = createHttpServer({ keepAlive: true, connectionsCheckingInterval }, handler);
  } else {
    const pki = await ensureServingPki(opts.dataDir!, [bind, advertise, ...(opts.certificateSans ?? [])]);
    caCertPem = pki.caCertPem;
    // Client certificates are asked for but not required: clients with tokens send none.
    server = createHttpsServer({ cert: pki.certPem, key: pki.keyPem, ca: pki.caCertPem, requestCert: true, rejectUnauthorized: false, keepAlive: true, connectionsCheckingInterval }, handler);
  }
  // No deadline on a whole request (watches and proxied streams last), one on its header: a client that
  // sends half a header is closed after headersTimeout instead of holding the connection for ever.
  server.requestTimeout = 0;
  server.headersTimeout = headersTimeout;
  server.keepAliveTimeout = 65_000;
  return { server, caCertPem };
}

/**
 * Listens on `bind:port` (with `SO_REUSEPORT` when `reusePort`); resolves with the port bound.
 * @throws Error naming the address when it cannot
 */
async function listen(server: Server | NetServer, port: number, bind: string, reusePort = false): Promise<number> {
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ port, host: bind, reusePort }, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (err: unknown) {
    throw new Error(`cannot listen on ${bind}:${port}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  return (server.address() as AddressInfo).port;
}

/**
 * This API server's id among several (the holder of checkpoint data it keeps on disk): read from
 * `<data-dir>/instance-id`, written there (whole, fsynced) the first time.
 */
function stableInstanceId(dataDir: string): string {
  const path = join(dataDir, 'instance-id');
  const kept = existsSync(path) ? readFileSync(path, 'utf8').trim() : '';
  if (/^[0-9a-f-]{36}$/.test(kept)) return kept;
  const id = randomUUID();
  writeFileAtomicSync(path, `${id}\n`, 0o600);
  return id;
}

/** `scheme://host:port` of an address (IPv6 in brackets). */
function urlOf(scheme: string, address: string, port: number): string {
  return `${scheme}://${address.includes(':') ? `[${address}]` : address}:${port}`;
}

/**
 * Starts the API server.
 * @throws RangeError for bad options (plain HTTP off loopback, missing data dir, bad sizes)
 * @throws Error when the port cannot be bound or the store cannot be opened
 * @example const s = await createApiServer({ dataDir: '/var/lib/kube32', port: 6443 }); ... await s.close();
 */
export async function createApiServer(opts: ApiServerOptions): Promise<ApiServer> {
  const { bind, kind, maxBodyBytes } = checkOptions(opts);
  const log = opts.logger ?? createLogger('apiserver');
  // The data dir holds the database, keys and kubeconfigs: 0700 whatever mode it was made with.
  if (opts.dataDir) {
    mkdirSync(opts.dataDir, { recursive: true, mode: 0o700 });
    chmodSync(opts.dataDir, 0o700);
  }
  const advertise = advertiseAddressOf(bind, opts.advertiseAddress);
  // On etcd every API server of the cluster shares one CA and token key, kept in etcd (docs/etcd.md).
  if (kind === 'etcd' && opts.dataDir) await joinClusterIdentity({ dataDir: opts.dataDir, endpoints: opts.etcdEndpoints ?? [], log });

  const storage = await openStorage(opts, kind);
  // Snapshots are kept in <data-dir>/checkpoint-data as well as in memory, and read back at a start (docs/checkpoints.md).
  const dataDirOfCheckpoints = opts.dataDir ? join(opts.dataDir, 'checkpoint-data') : undefined;
  if (dataDirOfCheckpoints) mkdirSync(dataDirOfCheckpoints, { recursive: true, mode: 0o700 });
  const checkpointData = new CheckpointDataStore(opts.checkpointDataBytes ?? DEFAULT_CHECKPOINT_DATA_BYTES, dataDirOfCheckpoints);
  // The namespaces with a ResourceQuota or a LimitRange: a create elsewhere reads neither.
  const quotaNamespaces = new QuotaNamespaces(storage);
  const registry = new Registry(storage, {
    async admitCreate(def, obj) {
      if (def.group === '' && def.plural === 'pods') {
        await resolvePodImage(storage, obj);
        await admitRuntimeClass(storage, obj);
        if (quotaNamespaces.has('limitranges', obj.metadata.namespace ?? '')) await admitLimitRanges(storage, def, obj);
      }
      if (def.namespaced && quotaNamespaces.has('resourcequotas', obj.metadata.namespace ?? '')) await admitQuota(storage, def, obj);
    },
    afterDelete(def, obj) {
      if (def === checkpoints) checkpointData.delete(`${obj.metadata.namespace}/${obj.metadata.name}`);
    },
  });
  await bootstrap(registry, log);
  await quotaNamespaces.start();
  const checkpointUids = new Map((await registry.list(checkpoints, undefined)).items.map((c) => [`${c.metadata.namespace}/${c.metadata.name}`, c.metadata.uid]));
  const readBack = checkpointData.load((key, uid) => checkpointUids.get(key) === uid);
  if (readBack > 0) log.info({ snapshots: readBack, bytes: checkpointData.usedBytes }, 'checkpoint data read back from the data dir');
  await ensureKubernetesService(registry, advertise, opts.port ?? 0, { endpoints: kind !== 'etcd' });
  let closed = false;
  const gc = new GarbageCollector(registry, log);
  await gc.start(opts.eventTtlMs ?? 3_600_000);
  const feosPods = new FeosPodIndex();
  await feosPods.start(storage);

  await reconcileBootstrapPolicy(registry, log);
  const authorizer = createAuthorizer(registry, log);
  const { adminToken, kubeletToken, verifyToken, mint } = tokens(opts.dataDir);
  // A bound token counts while it has not expired, names the API server's audience, and its account (and pod) still exist.
  const authenticateToken = async (t: string): Promise<UserInfo | undefined> => {
    const user = verifyToken(t);
    return user && await checkTokenBinding(registry, user) ? user : undefined;
  };
  // The watch cache: lists, gets and watches from memory, fed by one watch of the store.
  const cacher = new Cacher(storage, Math.min(opts.watchWindow ?? DEFAULT_CACHE_WINDOW, DEFAULT_CACHE_WINDOW), opts.watchWindow ?? DEFAULT_WATCH_WINDOW);
  const ctx: ServerContext = {
    registry,
    log,
    maxBodyBytes,
    maxModuleBytes: opts.maxModuleBytes ?? DEFAULT_MAX_MODULE_BYTES,
    watchHeartbeatMs: opts.watchHeartbeatMs ?? 10_000,
    cacher,
    watchBufferBytes: opts.watchBufferBytes,
    checkpointData,
    kubeletToken,
    authenticateToken,
    mintToken: mint,
    authorizer,
    streams: new Set(),
    streamEnders: new Map(),
  };
  const handler = createDispatcher(ctx, {
    metrics: createMetrics(storage, checkpointData, ctx.streams, cacher),
    health: healthChecks(storage, log),
    insecureHttp: opts.insecureHttp === true,
  });

  let server: Server;
  let caCertPem: string | undefined;
  let port: number;
  let peerServer: NetServer | undefined;
  let peerPort: number | undefined;
  let mainListening = false;
  // FeOS nodes' node proxy: an upgrade to a tunnel that the control plane's port for nodes takes (handlers/node-tunnel.ts).
  let nodeTunnel: NodeTunnel | undefined;
  let feosPodStreams: FeosPodStreams | undefined;
  const feosSockets = new Set<Duplex>();
  ctx.feosPodStreams = () => feosPodStreams;
  try {
    ({ server, caCertPem } = await httpServer(opts, bind, advertise, handler));
    // ...and the WebSockets of exec and port-forward into Pods bound to FeOS nodes (handlers/feos-pods.ts).
    (server as Server & { shouldUpgradeCallback: (req: IncomingMessage) => boolean }).shouldUpgradeCallback = (req) => isNodeTunnelUpgrade(req) || isFeosPodUpgrade(req, feosPods);
    server.on('upgrade', async (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      if (isNodeTunnelUpgrade(req)) await serveNodeTunnel(req, socket, head, { registry, authenticateToken, insecure: !!opts.insecureHttp, tunnel: () => nodeTunnel });
      else await serveFeosPodUpgrade(req, socket, head, { registry, log, authenticateToken, insecure: !!opts.insecureHttp, streams: () => feosPodStreams, sockets: feosSockets });
    });
    port = await listen(server, opts.port ?? 0, bind, opts.reusePort === true);
    mainListening = true;
    if (opts.peerPort !== undefined) {
      // This server's own port: its connections are the main server's (TLS and all), only the socket differs.
      const main = server;
      peerServer = createNetServer((socket) => main.emit('connection', socket));
      peerPort = await listen(peerServer, opts.peerPort, bind);
    }
  } catch (err: unknown) {
    // Nothing stays behind a server that could not start (in-process callers go on).
    closed = true;
    if (mainListening) server!.close();
    gc.stop();
    feosPods.stop();
    quotaNamespaces.stop();
    await storage.close();
    throw err;
  }
  await ensureKubernetesService(registry, advertise, port, { endpoints: kind !== 'etcd' });
  // kube-root-ca.crt in every namespace (kube-controller-manager's root-ca-cert-publisher; here, where the CA is).
  const rootCa = caCertPem ? new RootCaPublisher(registry, caCertPem, log) : undefined;
  await rootCa?.start();
  const scheme = opts.insecureHttp ? 'http' : 'https';
  const url = urlOf(scheme, bind === '0.0.0.0' ? '127.0.0.1' : bind, port);
  const dataPeers =
    kind === 'etcd' ? attachCheckpointDataPeers(ctx, storage, { selfUrl: urlOf(scheme, advertise, peerPort ?? port), caCertPem, leaseDurationSeconds: opts.identityLeaseDurationSeconds, ...(opts.dataDir ? { instance: stableInstanceId(opts.dataDir) } : {}) }) : undefined;
  let kubeconfigPath: string | undefined;
  if (opts.dataDir) {
    kubeconfigPath = adminKubeconfigPath(opts.dataDir);
    writeFileAtomicSync(kubeconfigPath, kubeconfigYaml({ server: url, token: adminToken, user: ADMIN_USER.name, caCertPem }), 0o600);
  }
  log.info({ url, ...(peerPort !== undefined ? { peerPort } : {}), storage: kind, dataDir: opts.dataDir }, 'API server listening');

  return {
    url,
    port,
    peerPort,
    kubeconfigPath,
    adminToken,
    caCertPem,
    registry,
    setNodeTunnel(t) {
      nodeTunnel = t;
    },
    setFeosPodStreams(s) {
      feosPodStreams = s;
    },
    async close() {
      if (closed) return;
      closed = true;
      await dataPeers?.stop();
      rootCa?.stop();
      authorizer.rbac.stop();
      quotaNamespaces.stop();
      gc.stop();
      cacher.stop();
      // No new connections; then every watch ends cleanly (res.end(): the chunked body's last chunk), as
      // kube-apiserver's graceful shutdown ends them: its client sees the watch end, not a reset, and watches
      // again (another API server). What has not finished within WATCH_END_GRACE_MS is cut, as the other streams.
      peerServer?.close();
      const closedServer = new Promise<void>((resolve) => server.close(() => resolve()));
      const ending = [...ctx.streamEnders];
      for (const [, end] of ending) end();
      for (const s of ctx.streams) if (!s.writableEnded) s.destroy();
      destroyAll(feosSockets);
      await endedWithin(ending.map(([res]) => res), WATCH_END_GRACE_MS);
      server.closeAllConnections();
      await closedServer;
      feosPods.stop();
      await storage.close();
    },
  };
}

/** How long close() waits for the ended watches' last bytes to leave before it cuts their connections, ms. */
const WATCH_END_GRACE_MS = 5_000;

/** Resolves once every response has finished (its last byte handed to the socket) or closed, or after `ms`. */
function endedWithin(responses: ServerResponse[], ms: number): Promise<void> {
  const open = responses.filter((r) => !r.writableFinished && !r.destroyed);
  if (open.length === 0) return Promise.resolve();
  return new Promise<void>((resolve) => {
    let left = open.length;
    const timer = setTimeout(resolve, ms);
    const one = () => {
      if (--left === 0) {
        clearTimeout(timer);
        resolve();
      }
    };
    for (const r of open) {
      let counted = false;
      const once = () => {
        if (counted) return;
        counted = true;
        one();
      };
      r.once('finish', once);
      r.once('close', once);
    }
  });
}

export { SYSTEM_NAMESPACES } from './bootstrap.ts';
