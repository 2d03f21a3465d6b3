/**
 * The API server's one request dispatcher: health and version (no credentials), authentication (bearer
 * token, the insecure port's admin, or a client certificate the cluster CA signed), metrics, discovery
 * and OpenAPI, the reviews, blobs, then the resources. Every error is answered as a `metav1.Status`;
 * every request is counted, timed, and logged once at debug level.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { ApiError, resourceNotFound } from './errors.ts';
import { authorize, bearerToken, verbOf } from './handlers/auth.ts';
import type { RequestScope, ServerContext, UserInfo } from './handlers/context.ts';
import { serveBlob } from './handlers/data.ts';
import { VERSION_INFO } from './handlers/discovery.ts';
import { type HealthChecks, isHealthPath, serveHealth } from './handlers/health.ts';
import { sendError, sendJson } from './handlers/http.ts';
import { serveNonResource } from './handlers/non-resource.ts';
import { serveResource } from './handlers/resources.ts';
import { serveAccessReview, serveSelfSubjectReview, serveTokenReview } from './handlers/reviews.ts';
import { normalizeBooleanParameters } from './handlers/query.ts';
import { parseResourcePath } from './handlers/router.ts';
import type { ServerMetrics } from './metrics.ts';
import { ADMIN_USER, userOfCertificate } from './pki.ts';

/** What the dispatcher needs beside the handlers' context. */
export interface DispatchOptions {
  metrics: ServerMetrics;
  health: HealthChecks;
  /** Plain HTTP on loopback: a request without a token is the admin's. */
  insecureHttp: boolean;
}

/** What one request is, for its metrics: set as the dispatcher learns it. */
interface RequestLabels {
  verb: string;
  resource: string;
  subresource: string;
}

/**
 * The user of a request: its bearer token's, the admin on the insecure port, or the subject of a client
 * certificate the cluster CA signed (CN the user, O its groups).
 * @throws ApiError `Unauthorized` when none
 */
function authenticate(req: IncomingMessage, ctx: ServerContext, insecureHttp: boolean): UserInfo {
  const token = bearerToken(req);
  let user: UserInfo | undefined;
  if (token) user = ctx.authenticateToken(token);
  else if (insecureHttp) user = ADMIN_USER;
  else {
    const sock = req.socket as TLSSocket;
    if (sock.authorized) user = userOfCertificate(sock.getPeerCertificate().subject as unknown as Record<string, string | string[] | undefined>);
  }
  if (!user) throw new ApiError('Unauthorized', 'Unauthorized');
  return user;
}

/** Serves one request (labels filled in for the metrics). */
async function serve(req: IncomingMessage, res: ServerResponse, ctx: ServerContext, o: DispatchOptions, labels: RequestLabels): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://apiserver');
  const path = url.pathname;
  // Health and version need no credentials, as in Kubernetes (system:unauthenticated may read them).
  if (isHealthPath(path)) return serveHealth(res, path, url.searchParams, o.health);
  if (path === '/version' || path === '/version/') return sendJson(res, 200, VERSION_INFO);
  const user = authenticate(req, ctx, o.insecureHttp);
  const info = parseResourcePath(path);
  // A proxied request's query is its target's (the node's, the service's), not the API server's.
  if (info?.subresource !== 'proxy') normalizeBooleanParameters(url.searchParams);
  if (path === '/metrics') {
    if (!user.groups.includes('system:masters')) throw new ApiError('Forbidden', `forbidden: User "${user.name}" cannot get path "/metrics"`);
    const body = await o.metrics.registry.metrics();
    res.writeHead(200, { 'Content-Type': o.metrics.registry.contentType });
    res.end(body);
    return;
  }
  if (req.method === 'GET' && serveNonResource(req, res, path)) return;
  if (req.method === 'POST') {
    const review = REVIEWS[path];
    if (review) {
      labels.verb = 'create';
      labels.resource = review.resource;
      return review.serve(req, res, ctx, user);
    }
  }
  const blob = /^\/apis\/kube32\.io\/v1\/blobs\/([^/]+)$/.exec(path);
  if (blob && req.method === 'GET') {
    labels.resource = 'blobs';
    labels.verb = 'get';
    return serveBlob(ctx, res, blob[1]!);
  }
  if (!info?.def) throw resourceNotFound();
  labels.resource = info.plural;
  labels.subresource = info.subresource ?? '';
  labels.verb = verbOf(req.method ?? 'GET', info, url.searchParams.get('watch') === 'true');
  authorize(ctx.registry, user, labels.verb, info);
  const scope: RequestScope = { req, res, url, user, info, ctx };
  await serveResource(scope);
}

/** The POSTed reviews, by path. */
const REVIEWS: Record<string, { resource: string; serve(req: IncomingMessage, res: ServerResponse, ctx: ServerContext, user: UserInfo): Promise<void> }> = {
  '/apis/authentication.k8s.io/v1/tokenreviews': { resource: 'tokenreviews', serve: (req, res, ctx) => serveTokenReview(req, res, ctx, ctx.maxBodyBytes) },
  '/apis/authentication.k8s.io/v1/selfsubjectreviews': { resource: 'selfsubjectreviews', serve: (req, res, ctx, user) => serveSelfSubjectReview(req, res, user, ctx.maxBodyBytes) },
  '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews': { resource: 'selfsubjectaccessreviews', serve: (req, res, ctx, user) => serveAccessReview(req, res, ctx.registry, user, ctx.maxBodyBytes) },
};

/** The `request` listener of the API server's HTTP(S) server. */
export function createDispatcher(ctx: ServerContext, o: DispatchOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const log = ctx.log;
  return (req, res) => {
    const started = process.hrtime.bigint();
    const labels: RequestLabels = { verb: (req.method ?? 'GET').toLowerCase(), resource: '', subresource: '' };
    res.on('finish', () => {
      o.metrics.requests.inc({ ...labels, code: String(res.statusCode) });
    });
    serve(req, res, ctx, o, labels)
      .catch((err: unknown) => {
        // An answer before the body was read (413, 404...): drain the body so the client gets the answer on a live connection.
        if (!req.complete) req.resume();
        const code = sendError(res, err);
        if (code >= 500) log.error({ method: req.method, url: req.url, err: err instanceof Error ? err.message : String(err) }, 'request failed');
      })
      .finally(() => {
        o.metrics.latency.observe({ verb: labels.verb, resource: labels.resource }, Number(process.hrtime.bigint() - started) / 1e9);
        if (log.isLevelEnabled('debug')) log.debug({ method: req.method, url: req.url, code: res.statusCode }, 'request');
      });
  };
}
