/**
 * The service proxy (`/api/v1/namespaces/<ns>/services/[<scheme>:]<name>[:<port>]/proxy/<path>` → a
 * ready endpoint of the service), holding a request while its service has no endpoint to take it
 * (issue 26, "No failed requests"): a moving pod has none for a moment, between the source's freeze and
 * the replacement's Ready. The request's body is read whole first (16 MiB at most, as a pod takes), so
 * that it can be sent again:
 *
 * - no ready address: the proxy looks again every 20 ms;
 * - a refused connection (nothing reached the pod): it picks an endpoint again and resends;
 * - an answer, whatever its status: passed back as it came.
 *
 * It holds a request {@link SERVICE_PROXY_HOLD_MS} (10 s) at most; then 503 ServiceUnavailable with
 * `Retry-After: 1` (`no endpoints available for service "<name>"`, as before, or the last connection
 * error). A connection that was accepted and then failed is not resent: the pod may have run it.
 */
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { ApiError } from '../errors.ts';
import { endpoints, services } from '../registry/core/index.ts';
import { arr, rec } from '../registry/util.ts';
import type { RequestScope } from './context.ts';

/** The longest the service proxy holds a request for an endpoint, ms. */
export const SERVICE_PROXY_HOLD_MS = 10_000;
/** The largest request body the service proxy takes, bytes (what a pod takes). */
export const SERVICE_PROXY_MAX_BODY = 16 << 20;
/** The pause before the proxy looks for an endpoint again, ms. */
const RETRY_MS = 20;

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host', 'authorization', 'content-length']);

function forwardHeaders(h: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
  return out;
}

/** The request's body, whole. @throws ApiError RequestEntityTooLarge past {@link SERVICE_PROXY_MAX_BODY} */
function readBody(scope: RequestScope): Promise<Buffer> {
  const { req } = scope;
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= SERVICE_PROXY_MAX_BODY) chunks.push(c);
    });
    req.on('error', reject);
    req.on('end', () => {
      if (size > SERVICE_PROXY_MAX_BODY) reject(new ApiError('RequestEntityTooLarge', `the request body is over ${SERVICE_PROXY_MAX_BODY} bytes, more than a pod takes`));
      else resolve(Buffer.concat(chunks));
    });
  });
}

/** A ready endpoint of the service's port now, if any. */
async function pickEndpoint(scope: RequestScope, ns: string, name: string, port: Record<string, unknown>): Promise<{ host: string; port: number } | undefined> {
  const ep = await scope.ctx.registry.find(endpoints, ns, name);
  for (const subset of arr(ep?.subsets)) {
    const epPort = arr(subset.ports).find((p) => (port.name ? p.name === port.name : true));
    const addrs = arr(subset.addresses);
    if (epPort && addrs.length) {
      const addr = addrs[Math.floor(Math.random() * addrs.length)]!;
      return { host: String(addr.ip), port: Number(epPort.port) };
    }
  }
  return undefined;
}

/** One attempt: `refused` when the connection was refused (nothing sent), else the answer was passed back. */
function attempt(scope: RequestScope, target: { host: string; port: number }, path: string, body: Buffer): Promise<'sent' | { refused: string }> {
  const { req, res, ctx } = scope;
  return new Promise((resolve) => {
    const headers = forwardHeaders(req.headers);
    headers['x-forwarded-for'] = req.socket.remoteAddress ?? '';
    headers['content-length'] = String(body.length);
    const up = httpRequest({ host: target.host, port: target.port, method: req.method, path, headers });
    let answered = false;
    const onClose = (): void => {
      if (!res.writableFinished) up.destroy();
    };
    res.on('close', onClose);
    up.on('response', (ur) => {
      answered = true;
      ctx.streams.add(res);
      res.writeHead(ur.statusCode ?? 502, forwardHeaders(ur.headers));
      res.flushHeaders();
      ur.pipe(res);
      const done = (): void => {
        ctx.streams.delete(res);
        res.off('close', onClose);
        resolve('sent');
      };
      ur.on('end', done);
      ur.on('error', () => {
        res.destroy();
        done();
      });
      res.on('close', done);
    });
    up.on('error', (err: NodeJS.ErrnoException) => {
      if (answered) return;
      res.off('close', onClose);
      if (err.code === 'ECONNREFUSED' && !res.destroyed) {
        resolve({ refused: err.message });
        return;
      }
      if (!res.headersSent && !res.destroyed) {
        const s = new ApiError('ServiceUnavailable', `error trying to reach service: ${err.message}`).toStatus();
        const text = JSON.stringify(s);
        res.writeHead(503, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
        res.end(text);
      } else res.destroy();
      resolve('sent');
    });
    up.end(body);
  });
}

/**
 * Serves the service proxy; see the file's comment.
 * @throws ApiError ServiceUnavailable (no such service port; no endpoint within the hold, with
 *   `Retry-After: 1`), RequestEntityTooLarge (a body over 16 MiB), NotFound (no such service)
 */
export async function serveServiceProxyHeld(scope: RequestScope, path: string): Promise<void> {
  const { ctx, info, res } = scope;
  const ns = info.namespace ?? '';
  const parts = info.name!.split(':');
  let name = parts[0]!;
  let portName = parts[1] ?? '';
  if (parts.length === 3) {
    name = parts[1]!;
    portName = parts[2]!;
  }
  const svc = await ctx.registry.get(services, ns, name);
  const ports = arr(rec(svc.spec).ports);
  const port = portName ? ports.find((p) => p.name === portName || String(p.port) === portName) : ports[0];
  if (!port) throw new ApiError('ServiceUnavailable', `no service port "${portName}" on service "${name}"`);
  const body = await readBody(scope);
  const deadline = Date.now() + SERVICE_PROXY_HOLD_MS;
  let last = `no endpoints available for service "${name}"`;
  for (;;) {
    if (res.destroyed) return;
    const target = await pickEndpoint(scope, ns, name, port);
    if (target) {
      const r = await attempt(scope, target, path, body);
      if (r === 'sent') return;
      last = `error trying to reach service: ${r.refused}`;
    }
    if (Date.now() + RETRY_MS > deadline) throw new ApiError('ServiceUnavailable', last, undefined, { headers: { 'Retry-After': '1' } });
    await new Promise((r) => setTimeout(r, RETRY_MS));
  }
}
