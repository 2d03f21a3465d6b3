/**
 * Node connections (seed 000, "The control plane", "Stopping"): ALPN `feos-node/1`, one to every
 * instance the control plane lists. On each, feosd is the HTTP/2 gRPC server of the API it serves on
 * its socket (the same service handlers, on a grpc-js server of the fleet's own, injected into the TLS
 * socket feosd dialed: `createConnectionInjector(insecure).injectConnection(socket)`, the socket being
 * TLS already), with up to 1024 streams and pings of its own (every 10 s, 10 s for the answer; not
 * grpc-js's keepalive, see {@link keepAlive}). A lost one is dialed again after 1 s, doubling up to 30 s,
 * until the stop.
 *
 * The stop (`stop`): GOAWAY on every connection (the dialers dial no more), the calls in flight end as
 * they do up to the calls' grace, then those still running get UNAVAILABLE "the node stops: the call
 * did not end within N s of feosd's stop" from an interceptor under the handlers (a unary call as its
 * answer, a stream as its trailers after what it sent; whatever the handler writes afterwards is
 * dropped), and the connections are closed within 5 s of that.
 */
import type http2 from 'node:http2';
import type tls from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from '../../lib/index.ts';
import { dialControlPlane, NODE_ALPN } from './tls.ts';

/** A service as a grpc-js server serves it. */
export interface ServedService {
  definition: grpc.ServiceDefinition;
  implementation: grpc.UntypedServiceImplementation;
}

/**
 * Records every service later added to `server` (its definition and handlers), for the node
 * connections to serve the same API as the socket. Call it before the services are added.
 * @returns the list, filled as services are added
 */
export function recordServices(server: grpc.Server): ServedService[] {
  const served: ServedService[] = [];
  const add = server.addService.bind(server);
  server.addService = (definition, implementation) => {
    served.push({ definition, implementation });
    add(definition, implementation);
  };
  return served;
}

/** The credentials a dial takes, read at each dial (they change at a renewal). */
export interface NodeCredentials {
  keyPem: string;
  chainPem: string;
  bundlePem: string;
}

/** What the node connections need. */
export interface NodeConnectionsOptions {
  services: ServedService[];
  /** --control-plane-name */
  name: string;
  trustDomain: string;
  credentials: () => NodeCredentials;
  log: Logger;
}

const FIRST_BACKOFF_MS = 1000;
const MAX_BACKOFF_MS = 30_000;
/** A ping every 10 s on a node connection, and 10 s for its answer. */
const PING_INTERVAL_MS = 10_000;
const PING_TIMEOUT_MS = 10_000;

/**
 * The HTTP/2 server (node:http2) grpc-js made for the injector just created on `server`, the newest of
 * its servers. grpc-js hands out neither it nor its sessions; it keeps them in its `http2Servers` map.
 * @returns the server, or undefined if this grpc-js keeps them elsewhere
 */
function newestHttp2Server(server: grpc.Server): http2.Http2Server | undefined {
  const map = (server as unknown as { http2Servers?: unknown }).http2Servers;
  return map instanceof Map ? ([...map.keys()].at(-1) as http2.Http2Server | undefined) : undefined;
}

/**
 * Pings `session` every 10 s and destroys it when a ping goes 10 s unanswered. Not grpc-js's keepalive:
 * its ping on a session that drains (GOAWAY sent, `session.close()`) makes Node's `ping()` answer
 * undefined (it does not ping a closed session), which grpc-js takes for a failed ping and destroys the
 * session at once, resetting the streams still running; a call cut at feosd's stop then never got its
 * UNAVAILABLE status whenever a ping fell within the calls' grace. A draining session is not pinged
 * here; the drain's and the stop's own limits close it.
 */
function keepAlive(session: http2.ServerHttp2Session): void {
  let answer: NodeJS.Timeout | undefined;
  const tick = setInterval(() => {
    if (session.closed || session.destroyed || answer) return;
    answer = setTimeout(() => session.destroy(), PING_TIMEOUT_MS);
    answer.unref();
    // An error is a ping cancelled by the session's own end: nothing to do.
    session.ping(() => {
      clearTimeout(answer);
      answer = undefined;
    });
  }, PING_INTERVAL_MS);
  tick.unref();
  session.once('close', () => {
    clearInterval(tick);
    clearTimeout(answer);
  });
}

interface Tracked {
  call: grpc.ServerInterceptingCallInterface;
  cut: boolean;
}

interface Conn {
  socket: tls.TLSSocket;
  injector: ReturnType<grpc.Server['createConnectionInjector']>;
}

/** The dialer of one instance's node connection. */
class Dialer {
  readonly address: string;
  readonly #owner: NodeConnections;
  #current?: Conn;
  readonly #draining = new Set<Conn>();
  #backoff = FIRST_BACKOFF_MS;
  #timer?: NodeJS.Timeout;
  #stopped = false;
  #lastError = '';

  constructor(address: string, owner: NodeConnections) {
    this.address = address;
    this.#owner = owner;
  }

  get connected(): boolean {
    return this.#current !== undefined;
  }

  /** Every open connection, the current one and those draining. */
  get connections(): Conn[] {
    return [...(this.#current ? [this.#current] : []), ...this.#draining];
  }

  start(): void {
    void this.#dial();
  }

  /** A new connection (with the credentials as they are now); the old one drains once it is up. */
  refresh(): void {
    if (this.#stopped) return;
    clearTimeout(this.#timer);
    void this.#dial();
  }

  async #dial(): Promise<void> {
    if (this.#stopped) return;
    const o = this.#owner.options;
    const c = o.credentials();
    let socket: tls.TLSSocket;
    try {
      socket = await dialControlPlane({
        address: this.address,
        name: o.name,
        trustDomain: o.trustDomain,
        alpn: NODE_ALPN,
        trust: { bundlePem: c.bundlePem },
        client: { keyPem: c.keyPem, chainPem: c.chainPem },
      });
    } catch (err: unknown) {
      const msg = (err as Error).message;
      if (msg !== this.#lastError) o.log.warn({ instance: this.address, err: msg, retryMs: this.#backoff }, 'node connection: dial failed; trying again');
      this.#lastError = msg;
      this.#schedule();
      return;
    }
    if (this.#stopped) {
      socket.destroy();
      return;
    }
    this.#lastError = '';
    this.#backoff = FIRST_BACKOFF_MS;
    const injector = this.#owner.server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
    const conn: Conn = { socket, injector };
    const old = this.#current;
    this.#current = conn;
    const h2 = newestHttp2Server(this.#owner.server);
    if (h2) h2.once('session', (session) => keepAlive(session as http2.ServerHttp2Session));
    else o.log.warn({ instance: this.address }, "node connection: grpc-js's HTTP/2 server was not found; it goes without pings");
    injector.injectConnection(socket);
    o.log.info({ instance: this.address }, 'node connection up');
    if (old) this.#drain(old, 30_000);
    socket.once('close', () => {
      injector.destroy();
      this.#draining.delete(conn);
      if (this.#current !== conn) return;
      this.#current = undefined;
      if (this.#stopped) return;
      o.log.warn({ instance: this.address, retryMs: this.#backoff }, 'node connection lost; dialing again');
      this.#schedule();
    });
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => void this.#dial(), this.#backoff);
    this.#backoff = Math.min(this.#backoff * 2, MAX_BACKOFF_MS);
  }

  /** GOAWAY on `conn`; it closes once its calls ended, or is cut after `graceMs`. */
  #drain(conn: Conn, graceMs: number): void {
    this.#draining.add(conn);
    conn.injector.drain(graceMs);
  }

  /** Dials no more and sends GOAWAY on every connection (cut after `graceMs` at the latest). */
  stop(graceMs: number): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    const cur = this.#current;
    this.#current = undefined;
    if (cur) {
      // Its 'close' finds it no longer current and dials no more.
      this.#drain(cur, graceMs);
    }
  }
}

/** The node connections to every instance listed. */
export class NodeConnections {
  readonly options: NodeConnectionsOptions;
  readonly server: grpc.Server;
  readonly #calls = new Set<Tracked>();
  readonly #dialers = new Map<string, Dialer>();
  #idle?: () => void;
  #stopped = false;

  constructor(options: NodeConnectionsOptions) {
    this.options = options;
    const interceptor: grpc.ServerInterceptor = (_method, call) => {
      const t: Tracked = { call, cut: false };
      this.#calls.add(t);
      const end = () => {
        this.#calls.delete(t);
        if (this.#calls.size === 0) this.#idle?.();
      };
      return new grpc.ServerInterceptingCall(call, {
        start: (next) => next({ onCancel: end }),
        sendMetadata: (md, next) => {
          if (!t.cut) next(md);
        },
        sendMessage: (msg, next) => {
          if (!t.cut) next(msg);
        },
        sendStatus: (status, next) => {
          if (t.cut) return;
          end();
          next(status);
        },
      });
    };
    this.server = new grpc.Server({
      'grpc.max_concurrent_streams': 1024,
      // No grpc-js keepalive (its default): the pings are keepAlive's.
      'grpc.max_receive_message_length': 512 * 1024 * 1024,
      interceptors: [interceptor],
    });
    for (const s of options.services) this.server.addService(s.definition, s.implementation);
  }

  /** The calls in flight on the node connections. */
  get callsInFlight(): number {
    return this.#calls.size;
  }

  /** The instances with a connection up. */
  connected(): string[] {
    return [...this.#dialers.values()].filter((d) => d.connected).map((d) => d.address);
  }

  /** Holds a connection to each of `addresses` (host:port), and drains those to the others. */
  setInstances(addresses: string[]): void {
    if (this.#stopped) return;
    const want = new Set(addresses);
    for (const [a, d] of this.#dialers) {
      if (!want.has(a)) {
        d.stop(30_000);
        this.#dialers.delete(a);
      }
    }
    for (const a of want) {
      if (this.#dialers.has(a)) continue;
      const d = new Dialer(a, this);
      this.#dialers.set(a, d);
      d.start();
    }
  }

  /** After a renewal: a new connection to each instance, with the new certificate; the old ones drain. */
  refresh(): void {
    for (const d of this.#dialers.values()) d.refresh();
  }

  /** Closes every connection at once (the node was removed). */
  destroy(): void {
    this.#stopped = true;
    for (const d of this.#dialers.values()) {
      const conns = d.connections;
      d.stop(0);
      for (const c of conns) c.socket.destroy();
    }
    this.#dialers.clear();
  }

  /**
   * The stop's steps 1 to 3 (seed "Stopping"): GOAWAY on every connection, the calls in flight up to
   * `callsGraceMs`, the rest ended with UNAVAILABLE "the node stops: …", the connections closed
   * within 5 s of that. Resolves once they are closed.
   */
  async stop(callsGraceMs: number): Promise<void> {
    this.#stopped = true;
    const conns = [...this.#dialers.values()].flatMap((d) => d.connections);
    for (const d of this.#dialers.values()) d.stop(callsGraceMs + 5000);
    const closed = Promise.all(conns.map((c) => (c.socket.destroyed ? undefined : new Promise<void>((r) => c.socket.once('close', () => r())))));
    if (this.#calls.size > 0) {
      await new Promise<void>((r) => {
        const timer = setTimeout(r, callsGraceMs);
        this.#idle = () => {
          clearTimeout(timer);
          r();
        };
      });
    }
    if (this.#calls.size > 0) {
      const details = `the node stops: the call did not end within ${Math.round(callsGraceMs / 100) / 10} s of feosd's stop`;
      this.options.log.warn({ calls: this.#calls.size, graceMs: callsGraceMs }, 'node connections: the calls still running are ended');
      for (const t of [...this.#calls]) {
        t.cut = true;
        this.#calls.delete(t);
        try {
          t.call.sendStatus({ code: grpc.status.UNAVAILABLE, details, metadata: new grpc.Metadata() });
        } catch {}
      }
    }
    let cut: NodeJS.Timeout | undefined;
    await Promise.race([closed, new Promise<void>((r) => (cut = setTimeout(r, 5000)))]);
    clearTimeout(cut);
    for (const c of conns) c.socket.destroy();
    this.server.forceShutdown();
  }
}
