/**
 * The node's pod ports: one HTTP listener per `containerPort` on the node's address, shared by the
 * pods that hold the port in turn, so that a request that meets a pod while it moves is held instead
 * of answered 503 (issue 26, "No failed requests"; a departure from the seed's "a frozen pod answers
 * 503 with Retry-After: 1", which stays the answer past the bounds):
 *
 * - A request to a pod that is frozen, or whose container is starting or restoring, is **held**, and
 *   handed to the pod once it runs again: where it is (a Save, a move rolled back) or at its
 *   replacement. A frozen pod takes no calls, so a held request has never run and runs exactly once.
 *   A call already running when the freeze began finishes first: the freeze waits for it.
 * - When a pod leaves the node (a move replaced it, elsewhere or here), its ports keep answering for
 *   {@link HoldLimits.forwardMs} (30 s): a request is forwarded to the node the pod is bound to now (the
 *   API server says where), or, when that is this node, to the pod that holds the port here now. A
 *   request another node forwarded here is forwarded on only after a lookup made since it came (not the
 *   last one, up to 250 ms old, which may predate a move that began meanwhile and point back at the node
 *   it came from), and only to a node where the pod runs: while the pod is bound here, unbound, or
 *   bound elsewhere and not running yet (moving), it is held here and looked up again every 20 ms. So
 *   two nodes whose last lookups point at each other do not send it to and fro; {@link MAX_FORWARDS}
 *   (4) stays the last resort. A
 *   forwarded answer carries `Connection: close`, so that a client holding a kept-alive connection to
 *   the old address reconnects, to wherever its Service or lookup now points, without a refused
 *   connection or a request cut off. A connection left idle is closed by the keep-alive timeout (5 s),
 *   never under a request the client may be sending on it.
 * - Bounded: a request is held {@link HoldLimits.timeoutMs} at most (10 s); a pod holds
 *   {@link HoldLimits.maxRequests} (64) requests and {@link HoldLimits.maxBytes} (16 MiB) of bodies at
 *   most. Past these: 503 with `Retry-After: 1`, as the seed answers a frozen pod.
 *
 * Flags: kube32-sim `--hold-timeout`, `--hold-requests`, `--hold-bytes`, `--moved-forward` (docs/kube32-sim.md).
 */
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import type { Logger } from '../lib/index.ts';
import { type PodInstance, readRequestBody, servePodRequest } from '../wasm/index.ts';
import { type ControlPlane, errorMessage, isApiError } from './client.ts';

/** The bounds of held requests and of the forwarding after a move. */
export interface HoldLimits {
  /** The longest a request is held, ms. @default 10 000 */
  timeoutMs: number;
  /** The most requests held for one pod. @default 64 */
  maxRequests: number;
  /** The most bytes of request bodies held for one pod. @default 16 MiB */
  maxBytes: number;
  /** How long a pod's ports keep answering (forwarding) after it left the node, ms. @default 30 000 */
  forwardMs: number;
}

/** The defaults of {@link HoldLimits}. */
export const DEFAULT_HOLD_LIMITS: Readonly<HoldLimits> = { timeoutMs: 10_000, maxRequests: 64, maxBytes: 16 << 20, forwardMs: 30_000 };

/** The header a forwarding node adds: how many nodes forwarded the request so far. */
export const FORWARDED_HEADER = 'x-kube32-forwarded';
/** The header a forwarding node adds: how long the request may still be held, ms. */
export const HOLD_LEFT_HEADER = 'x-kube32-hold-ms';
/** A request forwarded this many times is answered 503, not forwarded again: the last resort against a loop. */
export const MAX_FORWARDS = 4;
/** How long a lookup of where a moved pod runs now is used before it is made again, ms. */
const LOOKUP_TTL_MS = 250;
/** The pause before a forward that found no listener (or a lookup that found no node yet) tries again, ms. */
const RETRY_MS = 20;

/** What a request to a pod meets now (see {@link PortHolder.serving}). */
export type Serving = PodInstance | 'hold' | undefined;

/** A pod's container that holds a port: what its requests meet. */
export interface PortHolder {
  /** The pod's uid. */
  readonly uid: string;
  /** The pod's `namespace/name`. */
  readonly key: string;
  /**
   * The running instance to hand a request to; `'hold'` while the pod is frozen, starting or restoring;
   * undefined when it will not run soon (ended, waiting after a crash): the request gets 503 at once.
   */
  serving(): Serving;
}

/** What a holder is told about its port. */
export interface PortEvents {
  /** The node listens on the port for the holder (after a listen error too, once it succeeds). */
  listening(): void;
  /** The port cannot be listened on (taken by another process): tried again every 2 s. */
  error(err: Error): void;
}

/** A request whose body is read, waiting for its pod. */
interface Held {
  req: IncomingMessage;
  res: ServerResponse;
  body: Buffer;
  key: string;
  /** When it stops being held (answered 503), ms since the epoch. */
  deadline: number;
  timer: NodeJS.Timeout | undefined;
  /** True while a forward of it is under way (not re-dispatched meanwhile). */
  busy: boolean;
  /** The next look at a pod that left (its new place known, its port open), while one is due. */
  retry: NodeJS.Timeout | undefined;
  /** How many nodes forwarded it here ({@link FORWARDED_HEADER}); 0 for a client's request. */
  hops: number;
  /**
   * A forwarded request's: the lookups of where the pod runs that it may act on began at this
   * `performance.now()` or later (its arrival; then each time it was held because the pod was moving).
   */
  freshFrom: number;
}

/** A pod that left the node: its port forwards until `until`. */
interface Moved {
  key: string;
  namespace: string;
  name: string;
  until: number;
  timer: NodeJS.Timeout;
  /** The last lookup of where it runs: when it ended (ms since the epoch) and began (`performance.now()`). */
  lookup?: { at: number; began: number; where: Where };
  /** When the lookup under way began (`performance.now()`). */
  looking?: number;
  /** A lookup is to begin again once the one under way ends (a forwarded request needs one newer than it). */
  again?: boolean;
}

/**
 * Where a moved pod runs now: `node`, running (phase `Running`, a pod IP) at `host`; `moving`, bound to
 * the node at `host` and not running there yet (its replacement restoring or starting).
 */
type Where = { kind: 'here' } | { kind: 'node'; host: string } | { kind: 'moving'; host: string } | { kind: 'unbound' } | { kind: 'gone' };

/** One port on the node's address. */
interface Port {
  number: number;
  server: Server;
  listening: boolean;
  holder: PortHolder | undefined;
  /** Holders that asked for the port while another holds it (a pod still stopping). */
  waiting: Array<{ holder: PortHolder; events: PortEvents }>;
  moved: Moved | undefined;
  held: Held[];
  closed: boolean;
}

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade']);

function unavailable(res: ServerResponse, text: string): void {
  if (res.headersSent || res.destroyed) {
    res.destroy();
    return;
  }
  res.writeHead(503, { 'content-type': 'text/plain; charset=utf-8', 'retry-after': '1' });
  res.end(`${text}\n`);
}

/** Options of {@link PodPorts}. */
export interface PodPortsOptions {
  cp: ControlPlane;
  nodeName: string;
  address: string;
  log: Logger;
  limits?: Partial<HoldLimits>;
}

/**
 * The node's pod ports; see the file's comment.
 * @example const ports = new PodPorts({ cp, nodeName, address, log }); await ports.claim(8080, holder, {...});
 */
export class PodPorts {
  readonly limits: HoldLimits;
  readonly #o: PodPortsOptions;
  readonly #ports = new Map<number, Port>();
  /** Held requests and bytes, by pod `namespace/name`. */
  readonly #load = new Map<string, { count: number; bytes: number }>();
  #stopped = false;

  /** @throws RangeError for a limit that is not a positive whole number (forwardMs may be 0) */
  constructor(opts: PodPortsOptions) {
    this.#o = opts;
    this.limits = { ...DEFAULT_HOLD_LIMITS, ...opts.limits };
    for (const [k, v] of Object.entries(this.limits)) {
      if (!Number.isSafeInteger(v) || v < (k === 'forwardMs' ? 0 : 1)) throw new RangeError(`hold limit ${k} must be a whole number of at least ${k === 'forwardMs' ? 0 : 1}: current value is ${v}`);
    }
  }

  /** Requests held now for the pod `namespace/name`. */
  heldCount(key: string): number {
    return this.#load.get(key)?.count ?? 0;
  }

  /**
   * Gives `port` to `holder`: at once when the port is free or only forwards for a pod that left (its
   * held requests go to the holder), else once the pod holding it lets it go.
   * @param events told when the node listens on the port for the holder, or cannot (see {@link PortEvents})
   * @returns `serving` when the holder has the port now (listening, or soon), `waiting` when another pod holds it
   */
  claim(port: number, holder: PortHolder, events: PortEvents): 'serving' | 'waiting' {
    let p = this.#ports.get(port);
    if (!p) {
      p = this.#open(port);
      this.#ports.set(port, p);
    }
    if (p.holder && p.holder.uid !== holder.uid) {
      p.waiting.push({ holder, events });
      return 'waiting';
    }
    this.#endMoved(p, false);
    p.holder = holder;
    this.#listen(p, holder, events);
    this.#dispatchAll(p);
    return 'serving';
  }

  /**
   * The holder lets the port go. The next waiting holder takes it; else, with `forward`, the port
   * forwards the pod's requests for {@link HoldLimits.forwardMs}; else it closes (requests still held
   * get 503).
   */
  release(port: number, holder: PortHolder, opts: { forward: boolean }): void {
    const p = this.#ports.get(port);
    if (!p) return;
    p.waiting = p.waiting.filter((w) => w.holder.uid !== holder.uid);
    if (p.holder?.uid !== holder.uid) return;
    const next = p.waiting.shift();
    p.holder = next?.holder;
    if (next) {
      this.#listen(p, next.holder, next.events);
      this.#dispatchAll(p);
      return;
    }
    if (opts.forward && !this.#stopped && this.limits.forwardMs > 0) {
      const [namespace, name] = holder.key.split('/') as [string, string];
      const timer = setTimeout(() => this.#endMoved(p, true), this.limits.forwardMs);
      timer.unref();
      p.moved = { key: holder.key, namespace, name, until: Date.now() + this.limits.forwardMs, timer };
      this.#o.log.debug({ pod: holder.key, port }, 'pod left the node: its port forwards to where it runs now');
      this.#dispatchAll(p);
      return;
    }
    this.#close(p);
  }

  /** A holder's pod changed state (thawed, started, restored): its held requests are tried again. */
  kick(uid: string): void {
    for (const p of this.#ports.values()) if (p.holder?.uid === uid) this.#dispatchAll(p);
  }

  /** Closes every port; held requests get 503. */
  stop(): Promise<void> {
    this.#stopped = true;
    return Promise.all([...this.#ports.values()].map((p) => this.#close(p))).then(() => {});
  }

  #open(number: number): Port {
    const p: Port = { number, server: createServer(), listening: false, holder: undefined, waiting: [], moved: undefined, held: [], closed: false };
    p.server.keepAliveTimeout = 5000;
    p.server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      readRequestBody(req, res, (body) => this.#arrive(p, req, res, body));
    });
    return p;
  }

  #listen(p: Port, holder: PortHolder, events: PortEvents): void {
    if (p.listening) {
      events.listening();
      return;
    }
    const onListening = (): void => {
      p.server.off('error', onError);
      p.listening = true;
      events.listening();
    };
    const onError = (err: Error): void => {
      p.server.off('listening', onListening);
      if (p.closed || this.#stopped) return;
      events.error(err);
      setTimeout(() => {
        if (!p.closed && !this.#stopped && (p.holder?.uid === holder.uid || p.waiting.some((w) => w.holder.uid === holder.uid))) this.#listen(p, holder, events);
      }, 2000).unref();
    };
    p.server.once('listening', onListening);
    p.server.once('error', onError);
    p.server.listen(p.number, this.#o.address);
  }

  #close(p: Port): Promise<void> {
    if (this.#ports.get(p.number) === p) this.#ports.delete(p.number);
    p.closed = true;
    if (p.moved) clearTimeout(p.moved.timer);
    p.moved = undefined;
    for (const h of p.held.splice(0)) this.#unhold(h, 'the pod is not running');
    return new Promise<void>((resolve) => {
      if (!p.listening) return resolve();
      p.server.close(() => resolve());
      p.server.closeIdleConnections();
      // Connections with a request in flight end with it (a response sets Connection: close once closing).
      setTimeout(() => p.server.closeAllConnections(), 1000).unref();
    });
  }

  /** The forwarding of a pod that left ends (its window passed, or a pod took the port). */
  #endMoved(p: Port, expired: boolean): void {
    if (!p.moved) return;
    clearTimeout(p.moved.timer);
    p.moved = undefined;
    if (expired && !p.holder) void this.#close(p);
  }

  #arrive(p: Port, req: IncomingMessage, res: ServerResponse, body: Buffer): void {
    const key = p.holder?.key ?? p.moved?.key ?? '';
    const given = Number(req.headers[HOLD_LEFT_HEADER]);
    const limit = Number.isFinite(given) && given > 0 ? Math.min(given, this.limits.timeoutMs) : this.limits.timeoutMs;
    const hops = Number(req.headers[FORWARDED_HEADER] ?? 0);
    const h: Held = { req, res, body, key, deadline: Date.now() + limit, timer: undefined, busy: false, retry: undefined, hops: Number.isSafeInteger(hops) && hops > 0 ? hops : 0, freshFrom: performance.now() };
    this.#dispatch(p, h);
  }

  /** Hands `h` to the port's pod, forwards it, holds it, or answers 503. */
  #dispatch(p: Port, h: Held): void {
    if (h.res.destroyed) {
      this.#drop(p, h);
      return;
    }
    if (p.holder) {
      const s = p.holder.serving();
      if (s === undefined) {
        this.#answer503(p, h, 'the pod is not running');
        return;
      }
      if (s !== 'hold') {
        this.#drop(p, h);
        void servePodRequest(s, h.req, h.res, h.body, (m) => this.#o.log.warn({ port: p.number }, m)).then((outcome) => {
          // Refused before it ran (frozen meanwhile): held, and handed over again once it runs.
          if (outcome === 'refused') this.#dispatch(p, h);
        });
        return;
      }
      this.#hold(p, h);
      return;
    }
    if (p.moved) {
      if (h.hops >= MAX_FORWARDS) {
        this.#answer503(p, h, 'the pod is moving (forwarded too often)');
        return;
      }
      // A forwarded request acts only on a lookup begun since it came (or since it was last held).
      const where = this.#where(p.moved, h.hops > 0 ? h.freshFrom : undefined);
      if (where === undefined || where.kind === 'unbound' || where.kind === 'here') {
        this.#hold(p, h);
        return;
      }
      if (where.kind === 'gone') {
        this.#answer503(p, h, 'the pod is not running');
        return;
      }
      if (where.kind === 'moving' && h.hops > 0) {
        // Forwarded once already: held here until the pod runs at its new node (a lookup newer than now says so).
        h.freshFrom = performance.now();
        this.#hold(p, h);
        return;
      }
      this.#hold(p, h);
      this.#forward(p, h, where.host);
      return;
    }
    this.#answer503(p, h, 'the pod is not running');
  }

  #dispatchAll(p: Port): void {
    for (const h of [...p.held]) if (!h.busy) this.#dispatch(p, h);
  }

  #hold(p: Port, h: Held): void {
    if (!p.held.includes(h)) {
      const load = this.#load.get(h.key) ?? { count: 0, bytes: 0 };
      if (load.count + 1 > this.limits.maxRequests || load.bytes + h.body.length > this.limits.maxBytes) {
        this.#answer503(p, h, `the pod is moving: ${this.limits.maxRequests} requests or ${this.limits.maxBytes} bytes are held for it already`);
        return;
      }
      load.count++;
      load.bytes += h.body.length;
      this.#load.set(h.key, load);
      p.held.push(h);
      this.#o.log.debug({ pod: h.key, port: p.number, held: load.count }, 'request held');
      const left = h.deadline - Date.now();
      if (left <= 0) {
        this.#answer503(p, h, 'the pod is moving: held too long');
        return;
      }
      h.timer = setTimeout(() => this.#answer503(p, h, `the pod is moving: held ${this.limits.timeoutMs} ms`), left);
      h.timer.unref();
      h.res.once('close', () => this.#drop(p, h));
    }
    // A pod that left wakes nothing when its new place is known or its port opens: look again soon.
    if (p.moved && !h.busy) this.#retry(p, h);
  }

  /** Dispatches `h` again in {@link RETRY_MS} (one look due at a time, however often it is held). */
  #retry(p: Port, h: Held): void {
    if (h.retry) return;
    h.retry = setTimeout(() => {
      h.retry = undefined;
      if (p.held.includes(h) && !h.busy) this.#dispatch(p, h);
    }, RETRY_MS);
    h.retry.unref();
  }

  /** Takes `h` out of the held ones (answered elsewhere, or its client went). */
  #drop(p: Port, h: Held): void {
    const i = p.held.indexOf(h);
    if (i < 0) return;
    p.held.splice(i, 1);
    this.#release(h);
  }

  /** Ends `h`'s timer and takes it off its pod's count and bytes held. */
  #release(h: Held): void {
    if (h.timer) clearTimeout(h.timer);
    if (h.retry) clearTimeout(h.retry);
    h.retry = undefined;
    const load = this.#load.get(h.key);
    if (load) {
      load.count--;
      load.bytes -= h.body.length;
      if (load.count <= 0) this.#load.delete(h.key);
    }
  }

  #answer503(p: Port, h: Held, why: string): void {
    this.#drop(p, h);
    if (h.busy) return;
    unavailable(h.res, why);
  }

  #unhold(h: Held, why: string): void {
    this.#release(h);
    if (!h.busy) unavailable(h.res, why);
  }

  /**
   * Where a moved pod runs now. Without `freshFrom`: the last lookup while under {@link LOOKUP_TTL_MS}
   * old, else the last one while a new one runs in the background. With `freshFrom` (a
   * `performance.now()`): only a lookup begun at or after it, else undefined while one runs. The held
   * requests are dispatched again when a lookup ends.
   */
  #where(m: Moved, freshFrom?: number): Where | undefined {
    const last = m.lookup;
    if (freshFrom === undefined) {
      if (last && Date.now() - last.at < LOOKUP_TTL_MS) return last.where;
    } else if (last && last.began >= freshFrom) {
      return last.where;
    }
    if (m.looking === undefined) this.#look(m);
    else if (freshFrom !== undefined && m.looking < freshFrom) m.again = true;
    return freshFrom === undefined ? last?.where : undefined;
  }

  /** Begins a lookup of where `m` runs; once it ends, the held requests of its ports are dispatched again. */
  #look(m: Moved): void {
    const began = performance.now();
    m.looking = began;
    m.again = false;
    void this.#lookup(m).then((where) => {
      m.looking = undefined;
      if (where) m.lookup = { at: Date.now(), began, where };
      if (m.again) this.#look(m);
      for (const p of this.#ports.values()) if (p.moved === m) this.#dispatchAll(p);
    });
  }

  async #lookup(m: Moved): Promise<Where | undefined> {
    const { cp, nodeName } = this.#o;
    try {
      const pod = await cp.json<V1Pod>('GET', `/api/v1/namespaces/${m.namespace}/pods/${encodeURIComponent(m.name)}`);
      const node = pod.spec?.nodeName;
      if (!node) return { kind: 'unbound' };
      if (node === nodeName) return { kind: 'here' };
      const running = !!pod.status?.podIP && pod.status.phase === 'Running';
      if (running && pod.metadata?.annotations?.['kube32.io/restore-from'] === undefined) return { kind: 'node', host: pod.status!.podIP! };
      const n = await cp.json<V1Node>('GET', `/api/v1/nodes/${encodeURIComponent(node)}`);
      const host = n.status?.addresses?.find((a) => a.type === 'InternalIP')?.address;
      if (!host) return { kind: 'unbound' };
      return running ? { kind: 'node', host } : { kind: 'moving', host };
    } catch (err: unknown) {
      if (isApiError(err, 404)) return { kind: 'gone' };
      this.#o.log.debug({ pod: m.key, err: errorMessage(err) }, 'cannot look up where the moved pod runs');
      return undefined;
    }
  }

  /** Forwards a held request to the pod's port at `host`; a refused connection is tried again while the request may be held. */
  #forward(p: Port, h: Held, host: string): void {
    h.busy = true;
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(h.req.headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) headers[k] = v;
    headers[FORWARDED_HEADER] = String(Number(h.req.headers[FORWARDED_HEADER] ?? 0) + 1);
    headers[HOLD_LEFT_HEADER] = String(Math.max(1, h.deadline - Date.now()));
    headers['content-length'] = String(h.body.length);
    const up = httpRequest({ host, port: p.number, method: h.req.method, path: h.req.url, headers, agent: false });
    const onClientGone = (): void => {
      if (!h.res.writableFinished) up.destroy();
    };
    h.res.once('close', onClientGone);
    up.on('response', (ur) => {
      this.#drop(p, h);
      const out: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(ur.headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
      out.connection = 'close';
      h.res.shouldKeepAlive = false;
      h.res.writeHead(ur.statusCode ?? 502, out);
      ur.pipe(h.res);
      ur.on('error', () => h.res.destroy());
    });
    up.on('error', (err: NodeJS.ErrnoException) => {
      h.res.off('close', onClientGone);
      h.busy = false;
      if (h.res.headersSent) {
        h.res.destroy();
        return;
      }
      // Nothing reached the pod when the connection was refused: try again (the target's port opens soon).
      if (err.code === 'ECONNREFUSED') {
        if (!p.held.includes(h)) {
          unavailable(h.res, `the pod is moving: held ${this.limits.timeoutMs} ms`);
          return;
        }
        if (p.moved?.lookup) p.moved.lookup.at = 0;
        h.freshFrom = performance.now();
        this.#retry(p, h);
        return;
      }
      this.#drop(p, h);
      h.res.writeHead(502, { 'content-type': 'text/plain; charset=utf-8' });
      h.res.end(`forwarding to the pod's new node ${host} failed: ${err.message}\n`);
    });
    up.end(h.body);
  }
}
