/**
 * Proxies: the node proxy (`/api/v1/nodes/<node>/proxy/<path>` → the kubelet at the node's
 * InternalIP and `status.daemonEndpoints.kubeletEndpoint.Port`, plain HTTP, streaming both ways,
 * method, headers and body passed through, the kubelet's status and body passed back; the server
 * authenticates as `system:kube-apiserver` with its bearer token), pods' `log` (→ the node proxy's
 * `/containerLogs/<ns>/<pod>/<container>`) and the service proxy (→ a ready endpoint of the service, held while there is none: service-proxy.ts).
 */
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { ApiError, badRequest, notFound } from '../errors.ts';
import { nodes } from '../registry/nodes/index.ts';
import { pods } from '../registry/pods/index.ts';
import { arr, rec } from '../registry/util.ts';
import type { RequestScope } from './context.ts';
import { serveServiceProxyHeld } from './service-proxy.ts';

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host', 'authorization']);

function forwardHeaders(h: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
  return out;
}

/** Where a node's kubelet listens, from its status. */
export function kubeletAddress(node: Awaited<ReturnType<RequestScope['ctx']['registry']['get']>>): { host: string; port: number } {
  const st = rec(node.status);
  const addrs = arr(st.addresses);
  const host = (addrs.find((a) => a.type === 'InternalIP')?.address ?? addrs.find((a) => a.type === 'Hostname')?.address) as string | undefined;
  const port = rec(rec(rec(st.daemonEndpoints).kubeletEndpoint)).Port;
  if (!host || typeof port !== 'number' || port <= 0) {
    throw new ApiError('ServiceUnavailable', `node "${node.metadata.name}" has no kubelet endpoint (status.addresses InternalIP and status.daemonEndpoints.kubeletEndpoint.Port)`);
  }
  return { host, port };
}

/** Streams the request to `host:port` + `path` and the answer back; ends when either side does. */
function forward(scope: RequestScope, target: { host: string; port: number }, path: string, auth: boolean): Promise<void> {
  const { req, res, ctx } = scope;
  return new Promise<void>((resolve) => {
    const headers = forwardHeaders(req.headers);
    if (auth) headers.authorization = `Bearer ${ctx.kubeletToken}`;
    headers['x-forwarded-for'] = req.socket.remoteAddress ?? '';
    const up = httpRequest({ host: target.host, port: target.port, method: req.method, path, headers });
    ctx.streams.add(res);
    const done = () => {
      ctx.streams.delete(res);
      resolve();
    };
    up.on('response', (ur) => {
      const h = forwardHeaders(ur.headers);
      res.writeHead(ur.statusCode ?? 502, h);
      res.flushHeaders();
      ur.pipe(res);
      ur.on('end', done);
      ur.on('error', () => {
        res.destroy();
        done();
      });
    });
    up.on('error', (err) => {
      if (!res.headersSent) {
        const s = new ApiError('ServiceUnavailable', `error trying to reach service: ${err.message}`).toStatus();
        const body = JSON.stringify(s);
        res.writeHead(503, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
        res.end(body);
      } else res.destroy();
      done();
    });
    res.on('close', () => {
      if (!res.writableFinished) up.destroy();
      done();
    });
    req.pipe(up);
  });
}

/**
 * The path a proxy request takes at its target: `/` plus the rest of the proxy URL, with the
 * trailing `/` kept. `.../proxy` and `.../proxy/` both reach `/` (never `//`), as in Kubernetes.
 */
export function proxiedPath(subpath: string | undefined, trailingSlash: boolean | undefined): string {
  if (!subpath) return '/';
  return `/${subpath}${trailingSlash ? '/' : ''}`;
}

/** Serves `/api/v1/nodes/<node>/proxy/<path>`. */
export async function serveNodeProxy(scope: RequestScope): Promise<void> {
  const node = await scope.ctx.registry.get(nodes, '', scope.info.name!);
  const target = kubeletAddress(node);
  await forward(scope, target, `${proxiedPath(scope.info.subpath, scope.info.trailingSlash)}${scope.url.search}`, true);
}

/** Serves `GET pods/<pod>/log`: the container's log from its node, followed when `follow=true`. */
export async function servePodLog(scope: RequestScope): Promise<void> {
  const { ctx, info, url } = scope;
  const ns = info.namespace ?? '';
  const pod = await ctx.registry.get(pods, ns, info.name!);
  const spec = rec(pod.spec);
  const names = arr(spec.containers).map((c) => String(c.name));
  let container = url.searchParams.get('container') ?? '';
  if (!container) {
    const dflt = pod.metadata.annotations?.['kubectl.kubernetes.io/default-container'];
    if (dflt && names.includes(dflt)) container = dflt;
    else if (names.length === 1) container = names[0]!;
    else throw badRequest(`a container name must be specified for pod ${info.name}, choose one of: [${names.join(' ')}]`);
  }
  const all = [...names, ...arr(spec.initContainers).map((c) => String(c.name))];
  if (!all.includes(container)) throw badRequest(`container ${container} is not valid for pod ${info.name}`);
  if (!spec.nodeName) throw badRequest(`pod ${info.name} does not have a host assigned`);
  const node = await ctx.registry.find(nodes, '', String(spec.nodeName));
  if (!node) throw notFound('nodes', '', String(spec.nodeName));
  const target = kubeletAddress(node);
  const q = new URLSearchParams();
  for (const k of ['follow', 'tailLines', 'sinceSeconds', 'sinceTime', 'timestamps', 'previous', 'limitBytes']) {
    const v = url.searchParams.get(k);
    if (v !== null) q.set(k, v);
  }
  const qs = q.toString();
  await forward(scope, target, `/containerLogs/${encodeURIComponent(ns)}/${encodeURIComponent(info.name!)}/${encodeURIComponent(container)}${qs ? `?${qs}` : ''}`, true);
}

/**
 * Serves `/api/v1/namespaces/<ns>/pods/[<scheme>:]<name>[:<port>]/proxy/<path>`: the pod's HTTP at its
 * IP (the node's address) on the named or numbered container port, by default its first one.
 * @throws ApiError NotFound (no such pod), ServiceUnavailable (not running, no IP, no such port)
 */
export async function servePodProxy(scope: RequestScope): Promise<void> {
  const { ctx, info } = scope;
  const ns = info.namespace ?? '';
  const parts = info.name!.split(':');
  const name = parts.length === 3 ? parts[1]! : parts[0]!;
  const portName = parts.length === 3 ? parts[2]! : (parts[1] ?? '');
  const pod = await ctx.registry.get(pods, ns, name);
  const ip = rec(pod.status).podIP;
  if (!ip || rec(pod.status).phase !== 'Running') throw new ApiError('ServiceUnavailable', `pod ${name} is not running: it has no IP to proxy to`);
  const ports = arr(rec(pod.spec).containers).flatMap((c) => arr(c.ports));
  const port = portName ? ports.find((p) => p.name === portName || String(p.containerPort) === portName) : ports[0];
  const number = port ? Number(port.containerPort) : /^\d+$/.test(portName) ? Number(portName) : undefined;
  if (!number) throw new ApiError('ServiceUnavailable', portName ? `pod ${name} has no container port "${portName}"` : `pod ${name} declares no container port: name one, as in pods/${name}:8080/proxy/`);
  await forward(scope, { host: String(ip), port: number }, `${proxiedPath(info.subpath, info.trailingSlash)}${scope.url.search}`, false);
}

/**
 * Serves `/api/v1/namespaces/<ns>/services/[<scheme>:]<name>[:<port>]/proxy/<path>`: a ready endpoint,
 * the request held while there is none (see service-proxy.ts).
 */
export async function serveServiceProxy(scope: RequestScope): Promise<void> {
  await serveServiceProxyHeld(scope, `${proxiedPath(scope.info.subpath, scope.info.trailingSlash)}${scope.url.search}`);
}
