/**
 * `pods/log`, `pods/exec` and `pods/portforward` of Pods bound to FeOS nodes (docs/feos/fleet.md,
 * "Logs, exec and port-forward"; issue 18): served through the node connection with feosd's PodLogs,
 * ExecPod and PortForwardPod (the streams the control plane's port for nodes registers,
 * {@link FeosPodStreams}), the FeOS pod by `feosPodIdOf(pod)`, the container by its name in the Pod
 * spec (the FeOS container's name).
 *
 * - `kubectl logs` (`-f`, `--tail`, `-c`, `--limit-bytes`): plain HTTP, the log streamed. `--previous`
 *   is a 400 as Kubernetes answers for a container with no earlier run (the guest keeps the current run's
 *   log only); `--since`, `--since-time` and `--timestamps` are refused (the guest's log has no times).
 * - `kubectl exec`: a WebSocket with `v5.channel.k8s.io` (or `v4.channel.k8s.io`): stdin 0, stdout 1,
 *   stderr 2, the error channel 3 with the `metav1.Status` of the exit (NonZeroExitCode with the code),
 *   resize 4 (taken, not applied: ExecPod has no resize), v5's close of stdin (255, 0).
 * - `kubectl port-forward`: a WebSocket with `SPDY/3.1+portforward.k8s.io` (./spdy.ts): per connection
 *   an error stream and a data stream with the same `requestID` and `port`; the data stream is a
 *   PortForwardPod call.
 * - kubectl's fallback to SPDY (after a refused WebSocket, or a kubectl older than 1.30/1.31) reaches
 *   the plain request path: the same checks, then a 400 that says to use a kubectl that speaks WebSocket.
 * - `attach`: a 400 (a FeOS container's stdio is not kept for attaching).
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import type { V1Pod } from '@kubernetes/client-node';
import { ANNOTATIONS, feosPodIdOf } from '../../api/index.ts';
import type { Logger } from '../../lib/index.ts';
import { ApiError, badRequest, errorToStatus, type StatusReason } from '../errors.ts';
import { ADMIN_USER, userOfCertificate } from '../pki.ts';
import { nodes } from '../registry/nodes/index.ts';
import { pods } from '../registry/pods/index.ts';
import type { Registry } from '../registry/store.ts';
import { arr, rec } from '../registry/util.ts';
import { type KubeObject, keepListed, type Storage, type WatchHandle } from '../storage/index.ts';
import { authorize, bearerToken } from './auth.ts';
import { podLogOptions } from './log-options.ts';
import type { RequestScope, UserInfo } from './context.ts';
import { parseResourcePath, type ResourceRequest } from './router.ts';
import { spdyServer, type SpdyStream } from './spdy.ts';
import { acceptWebSocket, isWebSocketUpgrade, offeredProtocols } from './websocket.ts';

/** A failed call of a FeOS node: its gRPC status code and message. */
interface GrpcFailure {
  code: number;
  details: string;
}

/** An exec in flight on a FeOS node. */
export interface FeosExecCall {
  stdin(data: Uint8Array): void;
  closeStdin(): void;
  cancel(): void;
  /** The exit code. @throws an error with the gRPC `code` and `details` */
  done: Promise<number>;
}

/** A port-forward stream in flight on a FeOS node. */
export interface FeosForwardCall {
  write(data: Uint8Array): void;
  end(): void;
  cancel(): void;
  /** @throws an error with the gRPC `code` and `details` */
  done: Promise<void>;
}

/**
 * The streams of FeOS pods the control plane's port for nodes gives the API server (src/fleet's
 * `fleetPodStreams`): each call goes over the named node's connection; failures carry the gRPC
 * `code` and `details` (UNAVAILABLE without a connection).
 */
export interface FeosPodStreams {
  logs(node: string, req: { podId: string; container: string; follow: boolean; tailLines: number }, onData: (data: Uint8Array) => void, signal: AbortSignal): Promise<void>;
  exec(node: string, req: { podId: string; container: string; command: string[]; tty: boolean; stdin: boolean }, onOutput: (stream: 'stdout' | 'stderr', data: Uint8Array) => void): FeosExecCall;
  portForward(node: string, podId: string, port: number, onData: (data: Uint8Array) => void): FeosForwardCall;
}

/** The exec subprotocols served, the preferred first. */
export const EXEC_PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io'];
/** The port-forward subprotocol served (SPDY tunnelled in a WebSocket). */
export const PORT_FORWARD_PROTOCOL = 'SPDY/3.1+portforward.k8s.io';

const STREAM_SUBRESOURCES = new Set(['exec', 'attach', 'portforward']);

/** The FeOS node a Pod is bound to (a Node labelled `kube32.io/runtime=feos`), or undefined. */
export async function feosNodeOf(registry: Registry, pod: KubeObject): Promise<string | undefined> {
  const nodeName = rec(pod.spec).nodeName;
  if (typeof nodeName !== 'string' || !nodeName) return undefined;
  const node = await registry.find(nodes, '', nodeName);
  return node?.metadata.labels?.['kube32.io/runtime'] === 'feos' ? nodeName : undefined;
}

const GRPC_REASONS: Record<number, StatusReason> = {
  1: 'BadRequest', // CANCELLED
  3: 'BadRequest', // INVALID_ARGUMENT
  4: 'Timeout', // DEADLINE_EXCEEDED
  5: 'NotFound', // NOT_FOUND
  6: 'AlreadyExists',
  7: 'Forbidden', // PERMISSION_DENIED
  8: 'TooManyRequests', // RESOURCE_EXHAUSTED
  9: 'BadRequest', // FAILED_PRECONDITION
  10: 'Conflict', // ABORTED
  12: 'BadRequest', // UNIMPLEMENTED
  14: 'ServiceUnavailable', // UNAVAILABLE
};

/** A FeOS node's failure as the API's error, naming the FeOS pod and the node. */
function fromGrpc(err: unknown, podId: string, node: string): ApiError {
  const g = err as Partial<GrpcFailure>;
  if (typeof g.code !== 'number') return new ApiError('InternalError', `FeOS node "${node}": ${err instanceof Error ? err.message : String(err)}`);
  return new ApiError(GRPC_REASONS[g.code] ?? 'InternalError', `${g.details ?? ''} (FeOS pod ${podId} on node ${node})`);
}

/** The container a request names, by Kubernetes' rules (the default-container annotation, or the only one). @throws ApiError BadRequest */
function containerOf(pod: KubeObject, asked: string, withInit: boolean): string {
  const spec = rec(pod.spec);
  const names = arr(spec.containers).map((c) => String(c.name));
  const name = pod.metadata.name;
  let container = asked;
  if (!container) {
    const dflt = pod.metadata.annotations?.['kubectl.kubernetes.io/default-container'];
    if (dflt && names.includes(dflt)) container = dflt;
    else if (names.length === 1) container = names[0]!;
    else throw badRequest(`a container name must be specified for pod ${name}, choose one of: [${names.join(' ')}]`);
  }
  const all = withInit ? [...names, ...arr(spec.initContainers).map((c) => String(c.name))] : names;
  if (!all.includes(container)) throw badRequest(`container ${container} is not valid for pod ${name}`);
  return container;
}

/** What an exec asks, checked. */
interface ExecAsk {
  container: string;
  command: string[];
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
  tty: boolean;
}

const truthy = (url: URL, k: string) => ['true', '1'].includes((url.searchParams.get(k) ?? '').toLowerCase());

/** @throws ApiError BadRequest as Kubernetes answers (no command, no stream, a container not in the pod) */
function checkExec(pod: KubeObject, url: URL): ExecAsk {
  const command = url.searchParams.getAll('command');
  if (command.length === 0) throw badRequest('you must specify at least one command for the container');
  const ask = { stdin: truthy(url, 'stdin'), stdout: truthy(url, 'stdout'), stderr: truthy(url, 'stderr'), tty: truthy(url, 'tty') };
  if (!ask.stdin && !ask.stdout && !ask.stderr) throw badRequest('you must specify at least 1 of stdin, stdout, stderr');
  return { container: containerOf(pod, url.searchParams.get('container') ?? '', false), command, ...ask };
}

function attachRefused(pod: KubeObject): ApiError {
  return badRequest(`attach is not supported for microVM pods (pod "${pod.metadata.name}" runs on a FeOS node): use kubectl logs -f for its output and kubectl exec to run a command in it`);
}

/**
 * Serves the plain (not WebSocket) `pods/log|exec|attach|portforward` of a Pod bound to FeOS node
 * `node`: the log; for the others the checks of the WebSocket path and then a 400 naming the
 * WebSocket subprotocols (kubectl falls back to SPDY after a refused WebSocket).
 */
export async function serveFeosPodSubresource(scope: RequestScope, pod: KubeObject, node: string, streams: FeosPodStreams | undefined): Promise<void> {
  const sub = scope.info.subresource!;
  const method = scope.req.method ?? 'GET';
  if (sub === 'log') {
    if (method !== 'GET') throw new ApiError('MethodNotAllowed', `${method} is not supported on pods/log`);
    return serveLog(scope, pod, node, streams);
  }
  if (sub === 'attach') throw attachRefused(pod);
  if (sub === 'exec') {
    checkExec(pod, scope.url);
    throw badRequest(
      `exec into a microVM pod is served over WebSocket (subprotocol ${EXEC_PROTOCOLS.join(' or ')}), not SPDY: use kubectl 1.30 or newer (pod "${pod.metadata.name}" runs on FeOS node ${node})`,
    );
  }
  throw badRequest(
    `port-forward to a microVM pod is served over WebSocket (subprotocol ${PORT_FORWARD_PROTOCOL}), not SPDY: use kubectl 1.31 or newer, without KUBECTL_PORT_FORWARD_WEBSOCKETS=false (pod "${pod.metadata.name}" runs on FeOS node ${node})`,
  );
}

/**
 * The waiting reason of `container` in `pod`'s status (Suspended, Hibernated, ContainerCreating, ...) when
 * its status says it is waiting, else undefined (no status for it yet, or not waiting).
 */
function waitingReasonOf(pod: KubeObject, container: string): string | undefined {
  const status = rec(pod.status);
  const all = [...arr(status.containerStatuses), ...arr(status.initContainerStatuses)];
  const c = all.find((s) => s.name === container);
  if (!c) return undefined;
  const state = rec(c.state);
  if (state.waiting === undefined) return undefined;
  const reason = rec(state.waiting).reason;
  return typeof reason === 'string' && reason ? reason : 'ContainerCreating';
}

async function serveLog(scope: RequestScope, pod: KubeObject, node: string, streams: FeosPodStreams | undefined): Promise<void> {
  const { url, res, ctx } = scope;
  const name = pod.metadata.name;
  const container = containerOf(pod, url.searchParams.get('container') ?? '', true);
  if (truthy(url, 'previous')) {
    throw badRequest(`previous terminated container "${container}" in pod "${name}" not found (a microVM pod's guest keeps the log of its containers' current run only)`);
  }
  for (const [k, flag] of [
    ['sinceSeconds', '--since'],
    ['sinceTime', '--since-time'],
    ['timestamps', '--timestamps'],
  ] as const) {
    const v = url.searchParams.get(k);
    if (v !== null && v !== '' && v !== 'false') throw badRequest(`${flag} (${k}) is not supported for microVM pods: their guest keeps no times with the log; use --tail`);
  }
  // As the kubelet answers for a container that has not started. A reason the node settles (Suspended,
  // Hibernated, ErrImagePull, ...) is answered here; ContainerCreating, which the Pod's status also says
  // before its node answered at all, is asked of the node, which knows whether it has the FeOS pod.
  const waiting = waitingReasonOf(pod, container);
  const notStarted = () => badRequest(`container "${container}" in pod "${name}" is waiting to start: ${waiting ?? 'ContainerCreating'}`);
  if (waiting && (waiting !== 'ContainerCreating' || !streams)) throw notStarted();
  const { tailLines = 0, limitBytes = Infinity } = podLogOptions(url.searchParams, name ?? '');
  if (!streams) throw new ApiError('ServiceUnavailable', `this API server has no port for FeOS nodes (kube32-cli control-plane --feos-listen): the log of pod ${name} is on FeOS node ${node}`);
  const podId = feosPodIdOf(pod as unknown as V1Pod)!;
  const abort = new AbortController();
  let sent = 0;
  const start = () => {
    if (res.headersSent) return;
    res.writeHead(200, { 'Content-Type': 'text/plain', 'Transfer-Encoding': 'chunked' });
    res.flushHeaders();
  };
  ctx.streams.add(res);
  res.on('close', () => abort.abort());
  try {
    await streams.logs(
      node,
      { podId, container, follow: truthy(url, 'follow'), tailLines },
      (data) => {
        if (abort.signal.aborted) return;
        start();
        const room = limitBytes - sent;
        const piece = data.length > room ? data.subarray(0, room) : data;
        sent += piece.length;
        res.write(piece);
        if (sent >= limitBytes) abort.abort();
      },
      abort.signal,
    );
  } catch (err: unknown) {
    if (!abort.signal.aborted) {
      if (!res.headersSent) {
        // On its node but not RUNNING there (being resumed, restored, created), or not yet on it while a
        // move restores it: not started. Else a pod the node does not have gets the node's NOT_FOUND,
        // naming the FeOS pod and the node (the kubelet's "pod cannot be found").
        const code = (err as Partial<GrpcFailure>).code;
        if (code === 9 || (code === 5 && pod.metadata.annotations?.[ANNOTATIONS.restoreFrom] !== undefined)) throw notStarted();
        throw fromGrpc(err, podId, node);
      }
      ctx.log.info({ pod: name, node, err: (err as Partial<GrpcFailure>).details ?? String(err) }, 'a FeOS pod log ended early');
    }
  } finally {
    ctx.streams.delete(res);
  }
  start();
  res.end();
}

/** What {@link serveFeosPodUpgrade} needs of the server. */
export interface FeosUpgradeContext {
  registry: Registry;
  log: Logger;
  authenticateToken(token: string): Promise<UserInfo | undefined>;
  /** Plain HTTP on loopback: no token is the admin. */
  insecure: boolean;
  streams(): FeosPodStreams | undefined;
  /** Open upgraded sockets, destroyed when the server closes. */
  sockets: Set<Duplex>;
}

/** The pod stream request a URL names: exec/attach/portforward of a pod. */
function podStreamRequest(req: IncomingMessage): { url: URL; info: ResourceRequest } | undefined {
  const url = new URL(req.url ?? '/', 'http://apiserver');
  const info = parseResourcePath(url.pathname);
  if (info?.group !== '' || info.plural !== 'pods' || !info.namespace || !info.name || !STREAM_SUBRESOURCES.has(info.subresource ?? '') || info.subpath !== '') return undefined;
  return { url, info };
}

/**
 * Which Pods are bound to FeOS nodes (Nodes labelled `kube32.io/runtime=feos`), kept from the store's
 * watch of pods and nodes: the server's `shouldUpgradeCallback` is synchronous and the store's reads are
 * not, so the decision reads this index instead of the store.
 */
export class FeosPodIndex {
  readonly #feosNodes = new Set<string>();
  readonly #podNode = new Map<string, string>();
  readonly #handles: WatchHandle[] = [];

  /**
   * Lists pods and nodes, then follows their events; each kind is listed again when the store ends its
   * watch (etcd compacted events it had not delivered): keepListed.
   */
  async start(storage: Storage): Promise<void> {
    const kept = await Promise.allSettled([
      keepListed(storage, 'nodes', {
        replace: (items) => {
          this.#feosNodes.clear();
          for (const o of items) this.#node(o, false);
        },
        event: (e) => this.#node(e.object, e.type === 'DELETED'),
      }),
      keepListed(storage, 'pods', {
        replace: (items) => {
          this.#podNode.clear();
          for (const o of items) this.#pod(o, false);
        },
        event: (e) => this.#pod(e.object, e.type === 'DELETED'),
      }),
    ]);
    for (const k of kept) if (k.status === 'fulfilled') this.#handles.push(k.value);
    for (const k of kept) if (k.status === 'rejected') throw k.reason;
  }

  /** Stops following the store. */
  stop(): void {
    for (const h of this.#handles.splice(0)) h.stop();
  }

  #node(o: KubeObject, gone: boolean): void {
    if (!gone && o.metadata.labels?.['kube32.io/runtime'] === 'feos') this.#feosNodes.add(o.metadata.name!);
    else this.#feosNodes.delete(o.metadata.name!);
  }

  #pod(o: KubeObject, gone: boolean): void {
    const key = `${o.metadata.namespace}/${o.metadata.name}`;
    const node = rec(o.spec).nodeName;
    if (gone || typeof node !== 'string' || !node) this.#podNode.delete(key);
    else this.#podNode.set(key, node);
  }

  /** Whether the Pod `namespace/name` is bound to a FeOS node. */
  isFeosPod(namespace: string, name: string): boolean {
    const node = this.#podNode.get(`${namespace}/${name}`);
    return node !== undefined && this.#feosNodes.has(node);
  }
}

/**
 * Whether an upgrade is a WebSocket for exec, attach or port-forward of a Pod bound to a FeOS node
 * (part of the server's `shouldUpgradeCallback`); every other stays a plain request, as before.
 */
export function isFeosPodUpgrade(req: IncomingMessage, index: FeosPodIndex): boolean {
  if (!isWebSocketUpgrade(req)) return false;
  const r = podStreamRequest(req);
  if (!r) return false;
  return index.isFeosPod(r.info.namespace!, r.info.name!);
}

function refuse(socket: Duplex, err: unknown): void {
  const { status } = errorToStatus(err);
  const body = JSON.stringify(status);
  socket.end(`HTTP/1.1 ${status.code} ${status.reason ?? ''}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}

async function userOf(req: IncomingMessage, ctx: FeosUpgradeContext): Promise<UserInfo | undefined> {
  const token = bearerToken(req);
  if (token) return await ctx.authenticateToken(token);
  if (ctx.insecure) return ADMIN_USER;
  const sock = req.socket as TLSSocket;
  if (sock.authorized) return userOfCertificate(sock.getPeerCertificate().subject as unknown as Record<string, string | string[] | undefined>);
  return undefined;
}

/**
 * Serves a WebSocket upgrade that {@link isFeosPodUpgrade} took: authenticated and authorized as the
 * plain request would be (verb `create` on `pods/exec` or `pods/portforward`), checked, then the 101
 * and the stream; a refusal is the Status as an HTTP answer (kubectl then tries SPDY and prints the
 * plain path's answer).
 */
export async function serveFeosPodUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, ctx: FeosUpgradeContext): Promise<void> {
  socket.on('error', () => {});
  try {
    const r = podStreamRequest(req);
    if (!r) throw new ApiError('NotFound', 'the server could not find the requested resource');
    const { url, info } = r;
    const user = await userOf(req, ctx);
    if (!user) throw new ApiError('Unauthorized', 'Unauthorized');
    await authorize(ctx.registry, user, 'create', info);
    const pod = await ctx.registry.get(pods, info.namespace!, info.name!);
    const node = await feosNodeOf(ctx.registry, pod);
    if (!node) throw badRequest(`pod "${info.name}" is not bound to a FeOS node`);
    if (info.subresource === 'attach') throw attachRefused(pod);
    const streams = ctx.streams();
    const offered = offeredProtocols(req);
    const podId = feosPodIdOf(pod as unknown as V1Pod)!;
    if (info.subresource === 'exec') {
      const ask = checkExec(pod, url);
      const protocol = EXEC_PROTOCOLS.find((p) => offered.includes(p));
      if (!protocol) throw badRequest(`the WebSocket subprotocols offered (${offered.join(', ') || 'none'}) include none this server serves for exec: ${EXEC_PROTOCOLS.join(', ')}`);
      if (!streams) throw new ApiError('ServiceUnavailable', 'this API server has no port for FeOS nodes (kube32-cli control-plane --feos-listen): it holds no node connection');
      ctx.sockets.add(socket);
      socket.once('close', () => ctx.sockets.delete(socket));
      serveExec(req, socket, head, protocol, streams, node, podId, ask, ctx.log);
      return;
    }
    if (!offered.includes(PORT_FORWARD_PROTOCOL)) throw badRequest(`the WebSocket subprotocols offered (${offered.join(', ') || 'none'}) do not include ${PORT_FORWARD_PROTOCOL}, the one this server serves for port-forward`);
    if (!streams) throw new ApiError('ServiceUnavailable', 'this API server has no port for FeOS nodes (kube32-cli control-plane --feos-listen): it holds no node connection');
    ctx.sockets.add(socket);
    socket.once('close', () => ctx.sockets.delete(socket));
    servePortForward(req, socket, head, streams, node, podId, pod.metadata.name ?? info.name!, ctx.log);
  } catch (err: unknown) {
    refuse(socket, err);
  }
}

const STDIN = 0;
const STDOUT = 1;
const STDERR = 2;
const ERROR = 3;
const CLOSE = 255;

function exitStatus(code: number, command: string[]): Record<string, unknown> {
  if (code === 0) return { metadata: {}, status: 'Success' };
  return {
    metadata: {},
    status: 'Failure',
    message: `command terminated with non-zero exit code: error executing command [${command.join(' ')}], exit code ${code}`,
    reason: 'NonZeroExitCode',
    details: { causes: [{ reason: 'ExitCode', message: String(code) }] },
  };
}

function serveExec(req: IncomingMessage, socket: Duplex, head: Buffer, protocol: string, streams: FeosPodStreams, node: string, podId: string, ask: ExecAsk, log: Logger): void {
  const ws = acceptWebSocket(req, socket, head, protocol);
  const send = (channel: number, data: Uint8Array) => {
    const b = Buffer.alloc(1 + data.length);
    b[0] = channel;
    b.set(data, 1);
    ws.send(b);
  };
  const errorOut = (status: Record<string, unknown>) => {
    send(ERROR, Buffer.from(JSON.stringify(status)));
    ws.close(1000);
  };
  let call: FeosExecCall;
  try {
    call = streams.exec(node, { podId, container: ask.container, command: ask.command, tty: ask.tty, stdin: ask.stdin }, (which, data) => {
      if (which === 'stdout' && ask.stdout) send(STDOUT, data);
      else if (which === 'stderr' && ask.stderr) send(STDERR, data);
    });
  } catch (err: unknown) {
    errorOut(errorToStatus(fromGrpc(err, podId, node)).status as unknown as Record<string, unknown>);
    return;
  }
  ws.onMessage((m) => {
    if (m.length === 0) return;
    const channel = m[0]!;
    if (channel === STDIN && ask.stdin && m.length > 1) call.stdin(m.subarray(1));
    else if (channel === CLOSE && m[1] === STDIN) call.closeStdin();
    // Resize (4): ExecPod takes no window size; the terminal keeps the guest's.
  });
  let ended = false;
  ws.onClose(() => {
    if (!ended) call.cancel();
  });
  call.done.then(
    (code) => {
      ended = true;
      if (code < 0) errorOut(errorToStatus(new ApiError('InternalError', `the command ended without an exit code (FeOS pod ${podId} on node ${node})`)).status as unknown as Record<string, unknown>);
      else errorOut(exitStatus(code, ask.command));
    },
    (err: unknown) => {
      ended = true;
      if (ws.closed()) return;
      log.info({ node, podId, err: (err as Partial<GrpcFailure>).details ?? String(err) }, 'exec into a FeOS pod failed');
      errorOut(errorToStatus(fromGrpc(err, podId, node)).status as unknown as Record<string, unknown>);
    },
  );
}

function servePortForward(req: IncomingMessage, socket: Duplex, head: Buffer, streams: FeosPodStreams, node: string, podId: string, podName: string, log: Logger): void {
  const ws = acceptWebSocket(req, socket, head, PORT_FORWARD_PROTOCOL);
  const errorStreams = new Map<string, SpdyStream>();
  const calls = new Set<FeosForwardCall>();
  const session = spdyServer(
    (b) => ws.send(b),
    (why) => {
      log.info({ node, podId, why }, 'port-forward session broken');
      ws.close(1002, 'SPDY framing error');
    },
    (s) => {
      const type = s.headers.streamtype;
      const requestId = s.headers.requestid ?? '';
      const port = Number(s.headers.port);
      if (type === 'error') {
        errorStreams.set(requestId, s);
        return;
      }
      if (type !== 'data') {
        s.reset();
        return;
      }
      const errStream = errorStreams.get(requestId);
      errorStreams.delete(requestId);
      const fail = (msg: string) => {
        errStream?.write(Buffer.from(msg));
        errStream?.end();
        s.end();
      };
      if (!Number.isInteger(port) || port < 1 || port > 65535) {
        fail(`invalid port ${JSON.stringify(s.headers.port ?? '')}: want 1 to 65535`);
        return;
      }
      let call: FeosForwardCall;
      try {
        call = streams.portForward(node, podId, port, (d) => s.write(d));
      } catch (err: unknown) {
        fail(fromGrpc(err, podId, node).message);
        return;
      }
      calls.add(call);
      s.onData((d) => call.write(d));
      s.onEnd((reset) => (reset ? call.cancel() : call.end()));
      call.done.then(
        () => {
          calls.delete(call);
          s.end();
          errStream?.end();
        },
        (err: unknown) => {
          calls.delete(call);
          const e = err as Partial<GrpcFailure>;
          if (e.code === 1) {
            s.end();
            errStream?.end();
            return;
          }
          fail(`forwarding port ${port} of pod ${podName}: ${fromGrpc(err, podId, node).message}`);
        },
      );
    },
  );
  ws.onMessage((m) => session.receive(m));
  ws.onClose(() => {
    session.closed();
    for (const c of calls) c.cancel();
  });
}

/** The server's upgraded sockets of FeOS pod streams, for its close. */
export function destroyAll(sockets: Set<Duplex>): void {
  for (const s of sockets) s.destroy();
  sockets.clear();
}
