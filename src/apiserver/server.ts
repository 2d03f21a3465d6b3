/**
 * `createApiServer`: the API server in one call. It opens the store (SQLite in the data dir, or
 * memory for tests), makes sure the system namespaces exist, sets up the CA, serving certificate
 * and admin kubeconfig (HTTPS), or plain HTTP on loopback when asked, and serves every request
 * through one dispatcher: health and metrics, discovery and OpenAPI, TokenReview, blobs, then the
 * resources. Every error is answered as a `metav1.Status`; every request is logged once at debug
 * level and counted.
 */
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Duplex } from 'node:stream';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { Counter, Gauge, Histogram, Registry as MetricsRegistry, collectDefaultMetrics } from 'prom-client';
import { createLogger, type Logger, writeFileAtomicSync } from '../lib/index.ts';
import { advertiseAddressOf, bootstrap, ensureDefaultServiceAccount, ensureKubernetesService } from './bootstrap.ts';
import { joinClusterIdentity } from './cluster-identity.ts';
import { ApiError, resourceNotFound } from './errors.ts';
import { authorize, bearerToken, verbOf } from './handlers/auth.ts';
import { isNodeTunnelUpgrade, type NodeTunnel, serveNodeTunnel } from './handlers/node-tunnel.ts';
import { serveAccessReview, serveSelfSubjectReview, serveTokenReview } from './handlers/reviews.ts';
import type { RequestScope, ServerContext, UserInfo } from './handlers/context.ts';
import { DEFAULT_MAX_MODULE_BYTES, serveBlob } from './handlers/data.ts';
import {
  AGGREGATED_CONTENT_TYPE,
  VERSION_INFO,
  aggregatedDiscovery,
  legacyApiVersions,
  legacyGroup,
  legacyGroupList,
  legacyResourceList,
} from './handlers/discovery.ts';
import { DEFAULT_MAX_BODY_BYTES, sendError, sendJson } from './handlers/http.ts';
import { openApiDocument, openApiIndex } from './handlers/openapi.ts';
import { serveResource } from './handlers/resources.ts';
import { parseResourcePath } from './handlers/router.ts';
import { ADMIN_USER, APISERVER_USER, TokenAuthenticator, adminKubeconfigPath, ensureServingPki, kubeconfigYaml, mintToken, userOfCertificate } from './pki.ts';
import { CheckpointDataStore, DEFAULT_CHECKPOINT_DATA_BYTES } from './registry/checkpoints/data-store.ts';
import { checkpoints } from './registry/checkpoints/index.ts';
import { GarbageCollector } from './registry/gc.ts';
import { resolvePodImage } from './registry/modules/images.ts';
import { Registry } from './registry/store.ts';
import { RESOURCES } from './registry/catalog.ts';
import { storageKey } from './registry/types.ts';
import { MemoryStorage, SqliteStorage, type Storage } from './storage/index.ts';
import { EtcdStorage } from './storage/etcd.ts';
import { attachCheckpointDataPeers } from './checkpoint-data-peers.ts';

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
  /** Events kept for watch resumption. @default 50000 */
  watchWindow?: number;
  /** Core events older than this (by their last occurrence) are deleted, ms; 0 keeps them. @default 3600000 (1 h) */
  eventTtlMs?: number;
  /** Extra names or addresses for the serving certificate. */
  certificateSans?: string[];
  logger?: Logger;
}

/** A running API server. */
export interface ApiServer {
  /** `https://127.0.0.1:PORT` (or http://). */
  url: string;
  port: number;
  /** The admin kubeconfig's path (undefined with memory storage and no data dir). */
  kubeconfigPath: string | undefined;
  /** The admin's bearer token. */
  adminToken: string;
  /** PEM of the CA (undefined for plain HTTP). */
  caCertPem: string | undefined;
  registry: Registry;
  /** Registers (or, undefined, removes) what takes FeOS nodes' node proxy tunnels (handlers/node-tunnel.ts). */
  setNodeTunnel(tunnel: NodeTunnel | undefined): void;
  /** Stops listening, ends open streams, closes the store. */
  close(): Promise<void>;
}

function isLoopback(addr: string): boolean {
  return addr === 'localhost' || addr === '::1' || /^127\./.test(addr);
}

/**
 * Starts the API server.
 * @throws RangeError for bad options (plain HTTP off loopback, missing data dir, bad sizes)
 * @throws Error when the port cannot be bound or the store cannot be opened
 * @example const s = await createApiServer({ dataDir: '/var/lib/kube32', port: 6443 }); ... await s.close();
 */
export async function createApiServer(opts: ApiServerOptions): Promise<ApiServer> {
  const bind = opts.bindAddress ?? '127.0.0.1';
  const kind = opts.storage ?? 'sqlite';
  if (opts.insecureHttp && !isLoopback(bind)) throw new RangeError(`plain HTTP is only allowed on a loopback address: current bind address is ${bind}`);
  if (kind === 'sqlite' && !opts.dataDir) throw new RangeError('the sqlite storage needs a data dir (--data-dir)');
  if (!opts.insecureHttp && !opts.dataDir) throw new RangeError('HTTPS needs a data dir for its certificate authority (--data-dir), or use plain HTTP on loopback');
  const maxBodyBytes = opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  if (!Number.isSafeInteger(maxBodyBytes) || maxBodyBytes <= 0) throw new RangeError(`maxBodyBytes must be a positive integer: current value is ${maxBodyBytes}`);
  const leaseSeconds = opts.identityLeaseDurationSeconds;
  if (leaseSeconds !== undefined && (!Number.isInteger(leaseSeconds) || leaseSeconds < 3 || leaseSeconds > 3600)) throw new RangeError(`identityLeaseDurationSeconds must be an integer of 3 to 3600: current value is ${leaseSeconds}`);
  const log = opts.logger ?? createLogger('apiserver');
  if (opts.dataDir) mkdirSync(opts.dataDir, { recursive: true, mode: 0o700 });
  const advertise = advertiseAddressOf(bind, opts.advertiseAddress);
  // On etcd every API server of the cluster shares one CA and token key, kept in etcd (docs/etcd.md).
  if (kind === 'etcd' && opts.dataDir) await joinClusterIdentity({ dataDir: opts.dataDir, endpoints: opts.etcdEndpoints ?? [], log });

  const storage: Storage =
    kind === 'etcd'
      ? new EtcdStorage({ endpoints: opts.etcdEndpoints ?? [], watchWindow: opts.watchWindow })
      : kind === 'memory'
        ? new MemoryStorage({ watchWindow: opts.watchWindow })
        : new SqliteStorage(join(opts.dataDir!, 'kube32.db'), { watchWindow: opts.watchWindow });
  const checkpointData = new CheckpointDataStore(opts.checkpointDataBytes ?? DEFAULT_CHECKPOINT_DATA_BYTES);
  const registry = new Registry(storage, {
    admitCreate(def, obj) {
      if (def.group === '' && def.plural === 'pods') resolvePodImage(storage, obj);
    },
    afterDelete(def, obj) {
      if (def === checkpoints) checkpointData.delete(`${obj.metadata.namespace}/${obj.metadata.name}`);
    },
  });
  bootstrap(registry, log);
  ensureKubernetesService(registry, advertise, opts.port ?? 0, { endpoints: kind !== 'etcd' });
  let closed = false;
  const gc = new GarbageCollector(registry, log);
  gc.start(opts.eventTtlMs ?? 3_600_000);
  // A namespace made by anyone gets its default service account, as Kubernetes' controller makes it.
  const saWatch = storage.watch('namespaces', storage.currentResourceVersion(), (e) => {
    if (e.type !== 'ADDED') return;
    setImmediate(() => {
      if (closed) return;
      try {
        ensureDefaultServiceAccount(registry, e.name);
      } catch (err: unknown) {
        log.warn({ namespace: e.name, err: err instanceof Error ? err.message : String(err) }, 'cannot make the default service account');
      }
    });
  });

  const tokens = opts.dataDir ? new TokenAuthenticator(opts.dataDir) : undefined;
  const adminToken = opts.dataDir ? mintToken(opts.dataDir, ADMIN_USER) : 'insecure-admin';
  const kubeletToken = opts.dataDir ? mintToken(opts.dataDir, APISERVER_USER) : 'insecure-apiserver';
  const authenticateToken = (t: string): UserInfo | undefined => {
    if (tokens) return tokens.authenticate(t);
    // Without a data dir (plain HTTP, memory store) there is no signing key: the two fixed tokens are the only ones.
    if (t === adminToken) return ADMIN_USER;
    if (t === kubeletToken) return APISERVER_USER;
    return undefined;
  };

  const metrics = new MetricsRegistry();
  collectDefaultMetrics({ register: metrics });
  const requests = new Counter({ name: 'apiserver_request_total', help: 'Requests by verb, resource and HTTP code.', labelNames: ['verb', 'resource', 'subresource', 'code'], registers: [metrics] });
  const latency = new Histogram({
    name: 'apiserver_request_duration_seconds',
    help: 'Time to answer a request (watches and proxies: to their headers).',
    labelNames: ['verb', 'resource'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [metrics],
  });

  new Gauge({ name: 'apiserver_open_streams', help: 'Open watch and proxy streams.', registers: [metrics], collect() { this.set(ctx.streams.size); } });
  new Gauge({
    name: 'apiserver_storage_objects',
    help: 'Objects stored, by resource.',
    labelNames: ['resource'],
    registers: [metrics],
    collect() {
      for (const def of RESOURCES) this.set({ resource: storageKey(def) }, storage.listRaw(storageKey(def)).rows.length);
    },
  });
  new Gauge({ name: 'kube32_checkpoint_data_bytes', help: 'Bytes of checkpoint snapshots held in memory.', registers: [metrics], collect() { this.set(checkpointData.usedBytes); } });
  new Gauge({ name: 'kube32_checkpoint_data_capacity_bytes', help: 'Bytes of memory for checkpoint snapshots (--checkpoint-data-bytes).', registers: [metrics], collect() { this.set(checkpointData.capacity); } });

  const ctx: ServerContext = {
    registry,
    log,
    maxBodyBytes,
    maxModuleBytes: opts.maxModuleBytes ?? DEFAULT_MAX_MODULE_BYTES,
    watchHeartbeatMs: opts.watchHeartbeatMs ?? 10_000,
    checkpointData,
    kubeletToken,
    authenticateToken,
    streams: new Set(),
  };

  // Health checks as kube-apiserver names them: `etcd` fails while the store does not answer (a
  // linearizable read on etcd; a read of the default namespace on SQLite). livez leaves it out: a
  // restart does not bring etcd back (`/livez/etcd` still answers it alone, as in Kubernetes).
  let storageFailing = false;
  const storageCheck = (): string | undefined => {
    try {
      if (storage instanceof EtcdStorage) storage.etcdRevision();
      else storage.getRaw({ resource: 'namespaces', namespace: '', name: 'default' });
      if (storageFailing) log.info('storage answers again: ready');
      storageFailing = false;
      return undefined;
    } catch (err: unknown) {
      const reason = err instanceof Error ? err.message : String(err);
      if (!storageFailing) log.warn({ err: reason }, 'storage does not answer: not ready (/readyz etcd check failed)');
      storageFailing = true;
      return reason;
    }
  };
  const healthChecks: HealthChecks = { ping: [() => undefined, true], etcd: [storageCheck, false] };

  const handler = (req: IncomingMessage, res: ServerResponse) => {
    const started = process.hrtime.bigint();
    let verb = (req.method ?? 'GET').toLowerCase();
    let resource = '';
    let subresource = '';
    res.on('finish', () => {
      requests.inc({ verb, resource, subresource, code: String(res.statusCode) });
    });
    const observe = () => latency.observe({ verb, resource }, Number(process.hrtime.bigint() - started) / 1e9);
    void (async () => {
      const url = new URL(req.url ?? '/', 'http://apiserver');
      const path = url.pathname;
      // Health and version need no credentials, as in Kubernetes (system:unauthenticated may read them).
      if (path === '/healthz' || path === '/livez' || path === '/readyz' || path.startsWith('/healthz/') || path.startsWith('/livez/') || path.startsWith('/readyz/')) {
        serveHealth(res, path, url.searchParams, healthChecks);
        return;
      }
      if (path === '/version' || path === '/version/') return sendJson(res, 200, VERSION_INFO);
      const token = bearerToken(req);
      let user: UserInfo | undefined;
      if (token) user = authenticateToken(token);
      else if (opts.insecureHttp) user = ADMIN_USER;
      else {
        // A client certificate the cluster CA signed: CN is the user, O its groups.
        const sock = req.socket as TLSSocket;
        if (sock.authorized) user = userOfCertificate(sock.getPeerCertificate().subject as unknown as Record<string, string | string[] | undefined>);
      }
      if (!user) throw new ApiError('Unauthorized', 'Unauthorized');
      if (path === '/metrics') {
        if (!user.groups.includes('system:masters')) throw new ApiError('Forbidden', `forbidden: User "${user.name}" cannot get path "/metrics"`);
        const body = await metrics.metrics();
        res.writeHead(200, { 'Content-Type': metrics.contentType });
        res.end(body);
        return;
      }
      if (req.method === 'GET' && serveNonResource(req, res, path)) return;
      if (path === '/apis/authentication.k8s.io/v1/tokenreviews' && req.method === 'POST') {
        verb = 'create';
        resource = 'tokenreviews';
        return serveTokenReview(req, res, ctx, maxBodyBytes);
      }
      if (path === '/apis/authentication.k8s.io/v1/selfsubjectreviews' && req.method === 'POST') {
        verb = 'create';
        resource = 'selfsubjectreviews';
        return serveSelfSubjectReview(req, res, user, maxBodyBytes);
      }
      if (path === '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews' && req.method === 'POST') {
        verb = 'create';
        resource = 'selfsubjectaccessreviews';
        return serveAccessReview(req, res, registry, user, maxBodyBytes);
      }
      const blob = /^\/apis\/kube32\.io\/v1\/blobs\/([^/]+)$/.exec(path);
      if (blob && req.method === 'GET') {
        resource = 'blobs';
        verb = 'get';
        return serveBlob(ctx, res, blob[1]!);
      }
      const info = parseResourcePath(path);
      if (!info?.def) throw resourceNotFound();
      resource = info.plural;
      subresource = info.subresource ?? '';
      verb = verbOf(req.method ?? 'GET', info, url.searchParams.get('watch') === 'true');
      authorize(registry, user, verb, info);
      const scope: RequestScope = { req, res, url, user, info, ctx };
      await serveResource(scope);
    })()
      .catch((err: unknown) => {
        // An answer before the body was read (413, 404...): drain the body so the client gets the answer on a live connection.
        if (!req.complete) req.resume();
        const code = sendError(res, err);
        if (code >= 500) log.error({ method: req.method, url: req.url, err: err instanceof Error ? err.message : String(err) }, 'request failed');
      })
      .finally(() => {
        observe();
        if (log.isLevelEnabled('debug')) log.debug({ method: req.method, url: req.url, code: res.statusCode }, 'request');
      });
  };

  let server: Server;
  let caCertPem: string | undefined;
  if (opts.insecureHttp) {
    server = createHttpServer({ keepAlive: true }, handler);
  } else {
    const pki = await ensureServingPki(opts.dataDir!, [bind, advertise, ...(opts.certificateSans ?? [])]);
    caCertPem = pki.caCertPem;
    // Client certificates are asked for but not required: clients with tokens send none.
    server = createHttpsServer({ cert: pki.certPem, key: pki.keyPem, ca: pki.caCertPem, requestCert: true, rejectUnauthorized: false, keepAlive: true }, handler);
  }
  // FeOS nodes' node proxy: an upgrade to a tunnel that the control plane's port for nodes takes (handlers/node-tunnel.ts).
  let nodeTunnel: NodeTunnel | undefined;
  (server as Server & { shouldUpgradeCallback: (req: IncomingMessage) => boolean }).shouldUpgradeCallback = isNodeTunnelUpgrade;
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => serveNodeTunnel(req, socket, head, { registry, authenticateToken, insecure: !!opts.insecureHttp, tunnel: () => nodeTunnel }));
  server.requestTimeout = 0;
  server.headersTimeout = 60_000;
  server.keepAliveTimeout = 65_000;
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(opts.port ?? 0, bind, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (err: unknown) {
    // Nothing stays behind a server that could not start (in-process callers go on).
    closed = true;
    saWatch.stop();
    gc.stop();
    storage.close();
    throw new Error(`cannot listen on ${bind}:${opts.port ?? 0}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  const port = (server.address() as AddressInfo).port;
  ensureKubernetesService(registry, advertise, port, { endpoints: kind !== 'etcd' });
  const host = bind.includes(':') ? `[${bind}]` : bind === '0.0.0.0' ? '127.0.0.1' : bind;
  const url = `${opts.insecureHttp ? 'http' : 'https'}://${host}:${port}`;
  const selfUrl = `${opts.insecureHttp ? 'http' : 'https'}://${advertise.includes(':') ? `[${advertise}]` : advertise}:${port}`;
  const dataPeers =
    kind === 'etcd' ? attachCheckpointDataPeers(ctx, storage, { selfUrl, caCertPem, leaseDurationSeconds: opts.identityLeaseDurationSeconds }) : undefined;
  let kubeconfigPath: string | undefined;
  if (opts.dataDir) {
    kubeconfigPath = adminKubeconfigPath(opts.dataDir);
    writeFileAtomicSync(kubeconfigPath, kubeconfigYaml({ server: url, token: adminToken, user: ADMIN_USER.name, caCertPem }), 0o600);
  }
  log.info({ url, storage: kind, dataDir: opts.dataDir }, 'API server listening');

  return {
    url,
    port,
    kubeconfigPath,
    adminToken,
    caCertPem,
    registry,
    setNodeTunnel(t) {
      nodeTunnel = t;
    },
    async close() {
      if (closed) return;
      closed = true;
      saWatch.stop();
      dataPeers?.stop();
      gc.stop();
      for (const s of ctx.streams) s.destroy();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      storage.close();
    },
  };
}

/** Serves discovery and OpenAPI; false when `path` is not one of them. */
function serveNonResource(req: IncomingMessage, res: ServerResponse, path: string): boolean {
  const p = path.replace(/\/$/, '');
  const aggregated = /g=apidiscovery\.k8s\.io;v=v2/.test(String(req.headers.accept ?? ''));
  if (p === '/api' || p === '/apis') {
    if (aggregated) {
      const body = JSON.stringify(aggregatedDiscovery(p === '/api'));
      res.writeHead(200, { 'Content-Type': AGGREGATED_CONTENT_TYPE, 'Content-Length': Buffer.byteLength(body), Vary: 'Accept' });
      res.end(body);
    } else sendJson(res, 200, p === '/api' ? legacyApiVersions(req) : legacyGroupList(), { Vary: 'Accept' });
    return true;
  }
  if (p === '/api/v1') {
    sendJson(res, 200, legacyResourceList('', 'v1'));
    return true;
  }
  const g = /^\/apis\/([^/]+)$/.exec(p);
  if (g) {
    const doc = legacyGroup(g[1]!);
    if (!doc) throw resourceNotFound();
    sendJson(res, 200, doc);
    return true;
  }
  const gv = /^\/apis\/([^/]+)\/([^/]+)$/.exec(p);
  if (gv) {
    const doc = legacyResourceList(gv[1]!, gv[2]!);
    if (!doc) throw resourceNotFound();
    sendJson(res, 200, doc);
    return true;
  }
  if (p === '/openapi/v3') {
    sendJson(res, 200, openApiIndex());
    return true;
  }
  if (p.startsWith('/openapi/v3/')) {
    const doc = openApiDocument(p.slice('/openapi/v3/'.length));
    if (!doc) throw resourceNotFound();
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(doc), 'Cache-Control': 'public, immutable' });
    res.end(doc);
    return true;
  }
  if (p === '/openapi/v2' || p === '/swagger.json') throw resourceNotFound();
  return false;
}

export { SYSTEM_NAMESPACES } from './bootstrap.ts';

/** Named health checks: each answers undefined when healthy, else why not; the flag says whether `/livez` runs it. */
type HealthChecks = Record<string, [check: () => string | undefined, inLivez: boolean]>;

/**
 * `/healthz`, `/livez`, `/readyz` and their `/<endpoint>/<check>` paths, as kube-apiserver answers them:
 * 200 `ok` when every check passes; otherwise 500 with one line a check (`[+]ping ok`, `[-]etcd failed:
 * reason withheld`) and `<endpoint> check failed`. `?verbose` lists the checks also on success
 * (`<endpoint> check passed`); `?exclude=NAME` (repeatable) skips checks. One check alone answers `ok`,
 * or 500 `internal server error: <reason>`; an unknown one 404. `/livez` runs only the checks marked for it.
 */
function serveHealth(res: ServerResponse, path: string, query: URLSearchParams, checks: HealthChecks): void {
  const [, endpoint = '', name] = path.split('/');
  const send = (code: number, body: string) => {
    res.writeHead(code, { 'Content-Type': 'text/plain; charset=utf-8', 'X-Content-Type-Options': 'nosniff' });
    res.end(body);
  };
  if (name) {
    const entry = Object.hasOwn(checks, name) ? checks[name] : undefined;
    const reason = entry?.[0]();
    if (!entry) send(404, '404 page not found\n');
    else if (reason === undefined) send(200, 'ok');
    else send(500, `internal server error: ${reason}\n`);
    return;
  }
  const excluded = new Set(query.getAll('exclude'));
  const lines: string[] = [];
  let failed = false;
  for (const [check, [run, inLivez]] of Object.entries(checks)) {
    if (endpoint === 'livez' && !inLivez) continue;
    if (excluded.has(check)) {
      lines.push(`[+]${check} excluded: ok`);
      continue;
    }
    const reason = run();
    if (reason === undefined) lines.push(`[+]${check} ok`);
    else {
      failed = true;
      lines.push(`[-]${check} failed: reason withheld`);
    }
  }
  if (failed) send(500, `${lines.join('\n')}\n${endpoint} check failed\n`);
  else if (query.has('verbose')) send(200, `${lines.join('\n')}\n${endpoint} check passed\n`);
  else send(200, 'ok');
}
