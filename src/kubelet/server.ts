/**
 * The kubelet's HTTP endpoint (its `kubeletEndpoint` port on the node's address), which the API
 * server reaches through its node proxy (seed "Kubelet endpoints"):
 *
 * | method + path | what |
 * |---|---|
 * | `POST /checkpoint/<ns>/<pod>/<container>?leave=running\|frozen&timeoutMs=<ms>` | the pod's K32S snapshot: 200, 404, 409 `NotMovable`, 504 `Timeout` |
 * | `POST /thaw/<ns>/<pod>/<container>` | 200 `{"thawed":true}`, or 404 when the pod is not frozen |
 * | `GET /containerLogs/<ns>/<pod>/<container>?follow=&tailLines=&sinceSeconds=&sinceTime=&timestamps=&previous=&limitBytes=` | `kubectl logs` |
 * | `POST /publish/<ns>/<topic>` | a channel message from another node, for this node's subscribed pods |
 * | `GET /healthz` | `ok` (no token needed) |
 *
 * Every path but `/healthz` needs the control plane's identity (see `auth.ts`).
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Logger } from '../lib/index.ts';
import { PodStateError, type PodInstance } from '../wasm/index.ts';
import type { KubeletAuthenticator } from './auth.ts';
import { errorMessage } from './client.ts';
import type { ContainerRunner } from './container.ts';
import type { PodManager } from './pods.ts';
import { podSpecBlockers } from './spec-blockers.ts';

/** The freeze timeout when `timeoutMs` is not given: 10 s (seed). */
export const DEFAULT_FREEZE_TIMEOUT_MS = 10_000;
/** The longest freeze timeout a caller may ask for: 60 s (seed). */
export const MAX_FREEZE_TIMEOUT_MS = 60_000;
/** The largest channel message: 4 KiB (pod-abi.md `k32_channel_send`). */
export const MAX_MESSAGE_BYTES = 4096;

/** Writes a `metav1.Status` failure (with extra fields such as `blockers`). */
export function sendStatus(res: ServerResponse, code: number, reason: string, message: string, extra: Record<string, unknown> = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code, ...extra });
  res.writeHead(code, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
}

/** The RFC 3339 timestamp with nanoseconds that kubelets put before log lines (`--timestamps`). */
export function logTimestamp(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000000Z');
}

/** What the server needs from its node. */
export interface KubeletServerOptions {
  /** The node's pods (undefined until the pod manager exists: every pod is then not found). */
  pods: () => PodManager | undefined;
  auth: KubeletAuthenticator;
  log: Logger;
  /** Delivers a channel message from another node to this node's subscribed pods; answers how many got it. */
  deliver(namespace: string, topic: string, payload: Uint8Array): number;
}

const SEGMENT = '([^/]+)';
const ROUTES = {
  checkpoint: new RegExp(`^/checkpoint/${SEGMENT}/${SEGMENT}/${SEGMENT}$`),
  thaw: new RegExp(`^/thaw/${SEGMENT}/${SEGMENT}/${SEGMENT}$`),
  logs: new RegExp(`^/containerLogs/${SEGMENT}/${SEGMENT}/${SEGMENT}$`),
  publish: new RegExp(`^/publish/${SEGMENT}/${SEGMENT}$`),
} as const;

/** Creates the kubelet's HTTP server (not yet listening). */
export function createKubeletServer(opts: KubeletServerOptions): Server {
  const locks = new Map<string, Promise<unknown>>();
  /** Runs `fn` after any earlier checkpoint or thaw of the same container. */
  const serial = <T>(key: string, fn: () => Promise<T>): Promise<T> => {
    const prev = locks.get(key) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => {});
    locks.set(key, tail);
    void tail.then(() => {
      if (locks.get(key) === tail) locks.delete(key);
    });
    return next;
  };

  const findContainer = (res: ServerResponse, ns: string, pod: string, container: string): { runner: ContainerRunner; podObj: import('@kubernetes/client-node').V1Pod } | undefined => {
    const w = opts.pods()?.find(ns, pod);
    const runner = w?.container(container);
    if (!w || !runner) {
      sendStatus(res, 404, 'NotFound', w ? `container "${container}" not found in pod "${ns}/${pod}" on this node` : `pod "${ns}/${pod}" not found on this node`, { details: { name: pod, kind: 'pods' } });
      return undefined;
    }
    return { runner, podObj: w.pod };
  };

  async function checkpoint(req: IncomingMessage, res: ServerResponse, url: URL, ns: string, pod: string, container: string): Promise<void> {
    const leave = url.searchParams.get('leave') ?? 'running';
    if (leave !== 'running' && leave !== 'frozen') return sendStatus(res, 400, 'BadRequest', `leave must be "running" or "frozen": current value is "${leave}"`);
    const t = url.searchParams.get('timeoutMs');
    const timeoutMs = t === null ? DEFAULT_FREEZE_TIMEOUT_MS : Number(t);
    if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_FREEZE_TIMEOUT_MS) {
      return sendStatus(res, 400, 'BadRequest', `timeoutMs must be a whole number of ms from 1 to ${MAX_FREEZE_TIMEOUT_MS}: current value is "${t}"`);
    }
    const found = findContainer(res, ns, pod, container);
    if (!found) return;
    const { runner, podObj } = found;
    const inst = runner.instance;
    if (!inst) return sendStatus(res, 404, 'NotFound', `container "${container}" of pod "${ns}/${pod}" is not running`, { details: { name: pod, kind: 'pods' } });
    // A call still running is not refused here: the freeze below waits for it up to timeoutMs (504).
    const nodeBlockers = inst.blockers().filter((b) => !b.startsWith('call '));
    const blockers = [...new Set([...podSpecBlockers(podObj, { entryPoint: inst.module.entryPoint }), ...nodeBlockers])];
    if (blockers.length > 0) return sendStatus(res, 409, 'NotMovable', `pod ${ns}/${pod} cannot move: ${blockers.join('; ')}`, { blockers });
    const wasFrozen = inst.frozen;
    const thawIfNeeded = async () => {
      if (!wasFrozen && inst.frozen) await inst.thaw().catch(() => {});
    };
    if (!wasFrozen) {
      try {
        await inst.freeze(timeoutMs);
      } catch (err: unknown) {
        await thawIfNeeded();
        if (err instanceof PodStateError && err.code === 'Timeout') {
          const call = inst.runningCall?.name ?? 'k32_handle';
          const b = err.blockers.length > 0 ? err.blockers : [`call ${call} still running after ${timeoutMs} ms`];
          return sendStatus(res, 504, 'Timeout', `pod ${ns}/${pod}: ${b.join('; ')}`, { blockers: b });
        }
        if (err instanceof PodStateError && err.code === 'NotMovable') return sendStatus(res, 409, 'NotMovable', err.message, { blockers: err.blockers });
        if (err instanceof PodStateError && err.code === 'NotRunning') return sendStatus(res, 404, 'NotFound', err.message);
        throw err;
      }
    }
    opts.log.debug({ pod: `${ns}/${pod}`, container, leave }, 'checkpoint: pod frozen');
    let snapshot: Awaited<ReturnType<PodInstance['snapshot']>>;
    try {
      snapshot = await inst.snapshot({ digest: true });
    } catch (err: unknown) {
      await thawIfNeeded();
      if (err instanceof PodStateError && err.code === 'NotMovable') return sendStatus(res, 409, 'NotMovable', err.message, { blockers: err.blockers });
      if (err instanceof PodStateError) return sendStatus(res, 404, 'NotFound', err.message);
      throw err;
    }
    let complete = false;
    try {
      res.writeHead(200, {
        'content-type': 'application/octet-stream',
        'content-length': snapshot.byteLength,
        'x-kube32-image-sha256': snapshot.imageSha256,
        ...(snapshot.snapshotSha256 ? { 'x-kube32-snapshot-sha256': snapshot.snapshotSha256 } : {}),
        'x-kube32-pod-time-ms': String(snapshot.podTimeMs),
      });
      // The last chunk is held back until the end: the answer has a content-length, so a caller holds the
      // whole snapshot once its last byte arrives, before end(). `leave=running` thaws before that byte
      // goes out, so a caller that has the whole snapshot finds the pod serving again (its next request is
      // not answered 503; a thaw after the last write left a loaded node's pod frozen for it).
      let last: Uint8Array | undefined;
      for await (const chunk of snapshot.chunks) {
        if (res.destroyed) break;
        if (last !== undefined && !res.write(last)) await Promise.race([once(res, 'drain'), once(res, 'close')]);
        last = chunk;
      }
      if (!res.destroyed) {
        if (leave === 'running' && inst.frozen) await inst.thaw().catch(() => {});
        if (last === undefined) res.end();
        else res.end(last);
        complete = true;
      }
    } finally {
      if (leave === 'running') {
        if (inst.frozen) await inst.thaw().catch(() => {});
      }
      opts.log.info({ pod: `${ns}/${pod}`, container, leave, bytes: snapshot.byteLength, complete, user: (req as { user?: string }).user }, 'checkpoint served');
    }
  }

  async function thaw(res: ServerResponse, ns: string, pod: string, container: string): Promise<void> {
    const found = findContainer(res, ns, pod, container);
    if (!found) return;
    const inst = found.runner.instance;
    if (!inst?.frozen) return sendStatus(res, 404, 'NotFound', `pod "${ns}/${pod}" container "${container}" is not frozen`);
    try {
      await inst.thaw();
    } catch (err: unknown) {
      if (err instanceof PodStateError) return sendStatus(res, 404, 'NotFound', err.message);
      throw err;
    }
    const body = JSON.stringify({ thawed: true });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
  }

  async function logs(res: ServerResponse, url: URL, ns: string, pod: string, container: string): Promise<void> {
    const q = url.searchParams;
    const flag = (name: string) => q.get(name) === 'true' || q.get(name) === '1';
    const int = (name: string): number | undefined => {
      const v = q.get(name);
      if (v === null || v === '') return undefined;
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0) throw new RangeError(`${name} must be a whole number of 0 or more: current value is "${v}"`);
      return n;
    };
    let tail: number | undefined;
    let sinceSeconds: number | undefined;
    let limitBytes: number | undefined;
    let sinceTime: number | undefined;
    try {
      tail = int('tailLines');
      sinceSeconds = int('sinceSeconds');
      limitBytes = int('limitBytes');
      const st = q.get('sinceTime');
      if (st) {
        sinceTime = Date.parse(st);
        if (Number.isNaN(sinceTime)) throw new RangeError(`sinceTime must be an RFC 3339 time: current value is "${st}"`);
      }
    } catch (err: unknown) {
      return sendStatus(res, 400, 'BadRequest', errorMessage(err));
    }
    if (sinceSeconds !== undefined) sinceTime = Date.now() - sinceSeconds * 1000;
    const found = findContainer(res, ns, pod, container);
    if (!found) return;
    const { runner } = found;
    const previous = flag('previous');
    const inst = previous ? runner.previous : runner.current;
    if (!inst) {
      const state = runner.view().state;
      const why = previous
        ? `previous terminated container "${container}" in pod "${pod}" not found`
        : `container "${container}" in pod "${pod}" is waiting to start: ${state.kind === 'waiting' ? state.reason : 'ContainerCreating'}`;
      return sendStatus(res, 400, 'BadRequest', why);
    }
    const timestamps = flag('timestamps');
    const follow = flag('follow') && !previous;
    const ac = new AbortController();
    res.on('close', () => ac.abort());
    res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-cache' });
    res.flushHeaders();
    let sent = 0;
    try {
      for await (const entry of inst.logs({ ...(tail !== undefined ? { tail } : {}), ...(sinceTime !== undefined ? { sinceTime } : {}), follow, signal: ac.signal })) {
        let text = `${timestamps ? `${logTimestamp(entry.time)} ` : ''}${entry.line}\n`;
        if (limitBytes !== undefined && sent + Buffer.byteLength(text) > limitBytes) {
          text = Buffer.from(text).subarray(0, limitBytes - sent).toString();
          res.write(text);
          break;
        }
        sent += Buffer.byteLength(text);
        if (!res.write(text)) await Promise.race([once(res, 'drain'), once(res, 'close')]);
        if (res.destroyed) break;
      }
    } catch (err: unknown) {
      if (!ac.signal.aborted) opts.log.warn({ err: errorMessage(err) }, 'log stream failed');
    }
    if (!res.destroyed) res.end();
  }

  async function publish(req: IncomingMessage, res: ServerResponse, ns: string, topic: string): Promise<void> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of req as AsyncIterable<Buffer>) {
      size += c.length;
      if (size > MAX_MESSAGE_BYTES) return sendStatus(res, 413, 'RequestEntityTooLarge', `a channel message is at most ${MAX_MESSAGE_BYTES} bytes`);
      chunks.push(c);
    }
    const delivered = opts.deliver(ns, topic, new Uint8Array(Buffer.concat(chunks)));
    const body = JSON.stringify({ delivered });
    res.writeHead(202, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
  }

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://kubelet');
    const path = url.pathname;
    if (path === '/healthz') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      return;
    }
    const auth = await opts.auth.check(req);
    if (!auth.ok) return sendStatus(res, auth.status, auth.status === 401 ? 'Unauthorized' : 'Forbidden', auth.message);
    (req as { user?: string }).user = auth.user;
    const dec = (m: RegExpExecArray) => m.slice(1).map((s) => decodeURIComponent(s));
    let m = ROUTES.checkpoint.exec(path);
    if (m) {
      if (req.method !== 'POST') return sendStatus(res, 405, 'MethodNotAllowed', 'use POST');
      const [ns, pod, c] = dec(m) as [string, string, string];
      return serial(`${ns}/${pod}/${c}`, () => checkpoint(req, res, url, ns, pod, c));
    }
    m = ROUTES.thaw.exec(path);
    if (m) {
      if (req.method !== 'POST') return sendStatus(res, 405, 'MethodNotAllowed', 'use POST');
      const [ns, pod, c] = dec(m) as [string, string, string];
      return serial(`${ns}/${pod}/${c}`, () => thaw(res, ns, pod, c));
    }
    m = ROUTES.logs.exec(path);
    if (m) {
      if (req.method !== 'GET') return sendStatus(res, 405, 'MethodNotAllowed', 'use GET');
      const [ns, pod, c] = dec(m) as [string, string, string];
      return logs(res, url, ns, pod, c);
    }
    m = ROUTES.publish.exec(path);
    if (m) {
      if (req.method !== 'POST') return sendStatus(res, 405, 'MethodNotAllowed', 'use POST');
      const [ns, topic] = dec(m) as [string, string];
      return publish(req, res, ns, topic);
    }
    sendStatus(res, 404, 'NotFound', `no such kubelet endpoint: ${path}`);
  }

  return createServer((req, res) => {
    route(req, res).catch((err: unknown) => {
      opts.log.error({ err: errorMessage(err), url: req.url }, 'kubelet endpoint failed');
      sendStatus(res, 500, 'InternalError', errorMessage(err));
    });
  });
}
