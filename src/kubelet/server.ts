/**
 * The kubelet's HTTP endpoint (its `kubeletEndpoint` port on the node's address), which the API
 * server reaches through its node proxy (seed "Kubelet endpoints"):
 *
 * | method + path | what |
 * |---|---|
 * | `POST /checkpoint/<ns>/<pod>/<container>?leave=running\|frozen&timeoutMs=<ms>[&digest=false]` | the pod's K32S snapshot (`digest=false`: no `x-kube32-snapshot-sha256` header, no hashing pass before the bytes; the trailer carries it): 200, 404, 409 `NotMovable`, 504 `Timeout` |
 * | `POST /thaw/<ns>/<pod>/<container>` | 200 `{"thawed":true}`, or 404 when the pod is not frozen |
 * | `POST /restore-data/<ns>/<pod>/<container>/<checkpoint>` | a move's snapshot pushed ahead of its replacement (staged-restores.ts): 200 `{"staged":true\|false}`, 413 |
 * | `GET /containerLogs/<ns>/<pod>/<container>?follow=&tailLines=&sinceSeconds=&sinceTime=&timestamps=&previous=&limitBytes=` | `kubectl logs` |
 * | `POST /publish/<ns>/<topic>` | a channel message from another node, for this node's subscribed pods |
 * | `GET /stats/summary` | the Summary API's document of the node and its pods (stats.ts) |
 * | `GET /healthz` | `ok` (no token needed) |
 *
 * Every path but `/healthz` needs the control plane's identity (see `auth.ts`). While the node has fenced
 * its pods (fence.ts), checkpoints and thaws answer 503.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Logger } from '../lib/index.ts';
import type { KubeletAuthenticator } from './auth.ts';
import { errorMessage } from './client.ts';
import { findContainer, serveCheckpoint, serveThaw } from './http/checkpoint.ts';
import { logQuery, serveLogs } from './http/logs.ts';
import { servePublish } from './http/publish.ts';
import { EndpointError, sendError, wrongMethod } from './http/status.ts';
import type { PodManager } from './pods.ts';
import { HOUSEKEEPING_INTERVAL_MS, sampleContainers, serveSummary, UsageRates } from './stats.ts';

export { DEFAULT_FREEZE_TIMEOUT_MS, MAX_FREEZE_TIMEOUT_MS } from './http/checkpoint.ts';
export { logTimestamp } from './http/logs.ts';
export { MAX_MESSAGE_BYTES } from './http/publish.ts';
export { EndpointError, sendStatus } from './http/status.ts';

/** What the server needs from its node. */
export interface KubeletServerOptions {
  /** The node's pods (undefined until the pod manager exists: every pod is then not found). */
  pods: () => PodManager | undefined;
  auth: KubeletAuthenticator;
  log: Logger;
  /** Delivers a channel message from another node to this node's subscribed pods; answers how many got it. */
  deliver(namespace: string, topic: string, payload: Uint8Array): number;
  /** The node, for `/stats/summary`: its name, when its kubelet started (Unix ms), its heap in bytes. */
  node: { name: string; startedAtMs: number; heapBytes: number };
}

const SEGMENT = '([^/]+)';

/** One endpoint: its path, its method, and what serves it (the decoded path segments in `at`). */
interface Route {
  path: RegExp;
  method: 'GET' | 'POST';
  serve(req: IncomingMessage, res: ServerResponse, url: URL, at: string[]): Promise<void>;
}

/**
 * Runs `fn` after any earlier call of the same `key` has settled (checkpoints and thaws of one
 * container, one at a time).
 */
function serialiser(): <T>(key: string, fn: () => Promise<T>) => Promise<T> {
  const locks = new Map<string, Promise<unknown>>();
  return <T>(key: string, fn: () => Promise<T>): Promise<T> => {
    const prev = locks.get(key) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => {});
    locks.set(key, tail);
    void tail.then(() => {
      if (locks.get(key) === tail) locks.delete(key);
    });
    return next;
  };
}

/**
 * @throws EndpointError 503 `ServiceUnavailable` while the node has fenced its pods (it could not renew its
 *   Lease: fence.ts), so that no snapshot or thaw runs a fenced pod again
 */
function unlessFenced(pods: PodManager | undefined): void {
  if (pods?.fenced) throw new EndpointError(503, 'ServiceUnavailable', 'the node has fenced its pods: it could not renew its Lease for the grace period; they run again once it can');
}

/** The endpoints of the module doc's table. */
function routes(opts: KubeletServerOptions, rates: UsageRates): Route[] {
  const serial = serialiser();
  const container = (at: string[]) => ({ ns: at[0]!, pod: at[1]!, container: at[2]! });
  return [
    {
      path: new RegExp(`^/checkpoint/${SEGMENT}/${SEGMENT}/${SEGMENT}$`),
      method: 'POST',
      serve: (req, res, url, at) => serial(at.join('/'), () => {
        unlessFenced(opts.pods());
        return serveCheckpoint(req, res, url, opts.pods(), container(at), opts.log);
      }),
    },
    {
      path: new RegExp(`^/thaw/${SEGMENT}/${SEGMENT}/${SEGMENT}$`),
      method: 'POST',
      serve: (_req, res, _url, at) => {
        const c = container(at);
        return serial(at.join('/'), async () => {
          unlessFenced(opts.pods());
          return serveThaw(res, findContainer(opts.pods(), c.ns, c.pod, c.container), c);
        });
      },
    },
    {
      path: new RegExp(`^/restore-data/${SEGMENT}/${SEGMENT}/${SEGMENT}/${SEGMENT}$`),
      method: 'POST',
      serve: async (req, res, _url, at) => {
        const pods = opts.pods();
        unlessFenced(pods);
        if (!pods) throw new EndpointError(503, 'ServiceUnavailable', 'the node is not ready for pods yet');
        const len = req.headers['content-length'];
        const staged = await pods.staged.receive(req, { ns: at[0]!, pod: at[1]!, container: at[2]!, checkpoint: at[3]! }, len === undefined ? Number.NaN : Number(len), String(req.headers['x-kube32-snapshot-sha256'] ?? ''));
        const body = JSON.stringify({ staged: await staged.whole });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
      },
    },
    {
      path: new RegExp(`^/containerLogs/${SEGMENT}/${SEGMENT}/${SEGMENT}$`),
      method: 'GET',
      serve: async (_req, res, url, at) => {
        const q = logQuery(url.searchParams);
        const c = container(at);
        return serveLogs(res, q, findContainer(opts.pods(), c.ns, c.pod, c.container), c, opts.log);
      },
    },
    {
      path: new RegExp(`^/publish/${SEGMENT}/${SEGMENT}$`),
      method: 'POST',
      serve: (req, res, _url, at) => servePublish(req, res, at[0]!, at[1]!, (ns, topic, payload) => opts.deliver(ns, topic, payload)),
    },
    {
      path: /^\/stats\/summary\/?$/,
      method: 'GET',
      serve: (_req, res) => serveSummary(res, { nodeName: opts.node.name, startedAtMs: opts.node.startedAtMs, heapBytes: opts.node.heapBytes, pods: opts.pods(), rates }),
    },
  ];
}

/** Creates the kubelet's HTTP server (not yet listening). */
export function createKubeletServer(opts: KubeletServerOptions): Server {
  const rates = new UsageRates();
  const table = routes(opts, rates);
  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://kubelet');
    const path = url.pathname;
    if (path === '/healthz') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      return;
    }
    const auth = await opts.auth.check(req);
    if (!auth.ok) throw new EndpointError(auth.status, auth.status === 401 ? 'Unauthorized' : 'Forbidden', auth.message);
    (req as { user?: string }).user = auth.user;
    for (const r of table) {
      const m = r.path.exec(path);
      if (!m) continue;
      if (req.method !== r.method) throw wrongMethod(r.method);
      return r.serve(
        req,
        res,
        url,
        m.slice(1).map((s) => decodeURIComponent(s)),
      );
    }
    throw new EndpointError(404, 'NotFound', `no such kubelet endpoint: ${path}`);
  }

  const server = createServer((req, res) => {
    route(req, res).catch((err: unknown) => {
      const s = sendError(res, err);
      if (s.code === 500) opts.log.error({ err: errorMessage(err), url: req.url }, 'kubelet endpoint failed');
    });
  });
  // The housekeeping samples of the containers' CPU counters (stats.ts), while the server serves.
  let housekeeping: NodeJS.Timeout | undefined;
  server.on('listening', () => {
    housekeeping ??= setInterval(() => {
      sampleContainers(opts.pods(), rates).catch((err: unknown) => opts.log.debug({ err: errorMessage(err) }, 'kubelet: sampling the containers\' CPU failed'));
    }, HOUSEKEEPING_INTERVAL_MS);
    housekeeping.unref();
  });
  server.on('close', () => {
    clearInterval(housekeeping);
    housekeeping = undefined;
  });
  return server;
}
