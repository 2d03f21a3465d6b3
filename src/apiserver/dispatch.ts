/**
 * The API server's one request dispatcher: health and version (no credentials), authentication (bearer
 * token, the insecure port's admin, or a client certificate the cluster CA signed), metrics, discovery
 * and OpenAPI, the reviews, blobs, then the resources. Every error is answered as a `metav1.Status`;
 * every request is counted, timed, and logged once at debug level.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { ApiError, badRequest, resourceNotFound } from './errors.ts';
import { authorize, bearerToken, verbOf } from './handlers/auth.ts';
import type { RequestScope, ServerContext, UserInfo } from './handlers/context.ts';
import { serveBlob } from './handlers/data.ts';
import { VERSION_INFO } from './handlers/discovery.ts';
import { type HealthChecks, isHealthPath, serveHealth } from './handlers/health.ts';
import { decodeBody, mediaType, readBody, sendError, sendJson } from './handlers/http.ts';
import { serveNonResource } from './handlers/non-resource.ts';
import { serveResource } from './handlers/resources.ts';
import { serveAccessReview, serveRulesReview, serveSelfSubjectReview, serveSubjectAccessReview, serveTokenReview } from './handlers/reviews.ts';
import { serveTokenRequest } from './auth/tokens.ts';
import { normalizeBooleanParameters } from './handlers/query.ts';
import { METRICS_GROUP, METRICS_VERSION, serveResourceMetrics } from './handlers/resource-metrics.ts';
import { parseResourcePath } from './handlers/router.ts';
import { bindPod } from './registry/pods/binding.ts';
import { rec } from './registry/util.ts';
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
 * certificate the cluster CA signed (CN the user, O its groups); every one is in `system:authenticated`.
 * @throws ApiError `Unauthorized` when none
 */
async function authenticate(req: IncomingMessage, ctx: ServerContext, insecureHttp: boolean): Promise<UserInfo> {
  const token = bearerToken(req);
  let user: UserInfo | undefined;
  if (token) user = await ctx.authenticateToken(token);
  else if (insecureHttp) user = ADMIN_USER;
  else {
    const sock = req.socket as TLSSocket;
    if (sock.authorized) user = userOfCertificate(sock.getPeerCertificate().subject as unknown as Record<string, string | string[] | undefined>);
  }
  if (!user) throw new ApiError('Unauthorized', 'Unauthorized');
  return user;
}

/** The values of a request header, one per header line (kubectl sends one `Impersonate-Group` line per group; values are not split at commas). */
function headerValues(req: IncomingMessage, name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < req.rawHeaders.length; i += 2) if (req.rawHeaders[i]!.toLowerCase() === name) out.push(req.rawHeaders[i + 1]!);
  return out;
}

/**
 * The user a request acts as: the authenticated one, or the one its `Impersonate-User`,
 * `Impersonate-Group`, `Impersonate-Uid` and `Impersonate-Extra-<key>` headers name (`kubectl --as`,
 * `--as-group`) when the authenticated user may `impersonate` each of them (users, groups, uids and
 * userextras in authentication.k8s.io; serviceaccounts in their namespace), as kube-apiserver's
 * impersonation filter decides.
 * @throws ApiError Forbidden naming what may not be impersonated; BadRequest for groups without a user
 */
async function impersonate(req: IncomingMessage, ctx: ServerContext, user: UserInfo): Promise<UserInfo> {
  const names = headerValues(req, 'impersonate-user');
  const groups = headerValues(req, 'impersonate-group');
  const uids = headerValues(req, 'impersonate-uid');
  const extraKeys = Object.keys(req.headers).filter((h) => h.startsWith('impersonate-extra-'));
  if (names.length === 0) {
    if (groups.length > 0 || uids.length > 0 || extraKeys.length > 0) throw new ApiError('BadRequest', 'requested impersonation of groups, uid or extra without impersonating a user');
    return user;
  }
  const name = names[0]!;
  const check = async (verb: string, info: { group: string; plural: string; name?: string; namespace?: string }) => {
    const d = await ctx.authorizer.decide(user, verb, { group: info.group, plural: info.plural, name: info.name, namespace: info.namespace, subresource: undefined, subpath: '' });
    if (!d.allowed) throw new ApiError('Forbidden', `${info.plural}${info.group ? `.${info.group}` : ''} "${info.name ?? ''}" is forbidden: User "${user.name}" cannot impersonate resource "${info.plural}" in API group "${info.group}"${info.namespace ? ` in the namespace "${info.namespace}"` : ' at the cluster scope'}`, {
      name: info.name,
      group: info.group || undefined,
      kind: info.plural,
    });
  };
  const sa = /^system:serviceaccount:([^:]+):([^:]+)$/.exec(name);
  const out: UserInfo = { name, groups: [] };
  if (sa) {
    await check('impersonate', { group: '', plural: 'serviceaccounts', namespace: sa[1], name: sa[2] });
    out.groups.push('system:serviceaccounts', `system:serviceaccounts:${sa[1]}`);
  } else {
    await check('impersonate', { group: '', plural: 'users', name });
  }
  for (const g of groups) {
    await check('impersonate', { group: '', plural: 'groups', name: g });
    out.groups.push(g);
  }
  if (uids.length > 0) {
    await check('impersonate', { group: 'authentication.k8s.io', plural: 'uids', name: uids[0] });
    out.uid = uids[0];
  }
  if (extraKeys.length > 0) {
    out.extra = {};
    for (const h of extraKeys) {
      const key = decodeURIComponent(h.slice('impersonate-extra-'.length));
      const values = headerValues(req, h);
      for (const v of values) await check('impersonate', { group: 'authentication.k8s.io', plural: 'userextras', name: v });
      out.extra[key] = values;
    }
  }
  if (name !== 'system:anonymous' && !out.groups.includes('system:authenticated')) out.groups.push('system:authenticated');
  return { ...out, groups: [...new Set(out.groups)] };
}

/** Serves one request (labels filled in for the metrics). */
async function serve(req: IncomingMessage, res: ServerResponse, ctx: ServerContext, o: DispatchOptions, labels: RequestLabels): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://apiserver');
  const path = url.pathname;
  // Health and version need no credentials, as in Kubernetes (system:unauthenticated may read them).
  if (isHealthPath(path)) return await serveHealth(res, path, url.searchParams, o.health);
  if (path === '/version' || path === '/version/') return sendJson(res, 200, VERSION_INFO);
  const user = await impersonate(req, ctx, await authenticate(req, ctx, o.insecureHttp));
  const info = parseResourcePath(path);
  // A proxied request's query is its target's (the node's, the service's), not the API server's.
  if (info?.subresource !== 'proxy') normalizeBooleanParameters(url.searchParams);
  if (path === '/metrics') {
    await ctx.authorizer.authorizePath(user, 'get', '/metrics');
    const body = await o.metrics.registry.metrics();
    res.writeHead(200, { 'Content-Type': o.metrics.registry.contentType });
    res.end(body);
    return;
  }
  // Discovery, OpenAPI and health: every authenticated user may read them (system:discovery).
  if (req.method === 'GET' && serveNonResource(req, res, path)) return;
  if (req.method === 'POST') {
    const review = REVIEWS[path] ?? localReview(path);
    if (review) {
      labels.verb = 'create';
      labels.resource = review.resource;
      await ctx.authorizer.authorize(user, 'create', { group: review.group, plural: review.resource, namespace: review.namespace, name: undefined, subresource: undefined, subpath: '' });
      return review.serve(req, res, ctx, user);
    }
  }
  const binding = /^\/api\/v1\/namespaces\/([^/]+)\/bindings\/?$/.exec(path);
  if (binding) {
    labels.resource = 'bindings';
    labels.verb = 'create';
    if (req.method !== 'POST') throw new ApiError('MethodNotAllowed', `${req.method} is not supported on bindings: create a Binding with POST`);
    const namespace = decodeURIComponent(binding[1]!);
    await ctx.authorizer.authorize(user, 'create', { group: '', plural: 'bindings', namespace, name: undefined, subresource: undefined, subpath: '' });
    return serveBinding(req, res, ctx, url, namespace);
  }
  const blob = /^\/apis\/kube32\.io\/v1\/blobs\/([^/]+)$/.exec(path);
  if (blob && req.method === 'GET') {
    labels.resource = 'blobs';
    labels.verb = 'get';
    return await serveBlob(ctx, res, blob[1]!);
  }
  if (info && !info.def && info.group === METRICS_GROUP && info.version === METRICS_VERSION) {
    labels.resource = info.plural;
    labels.verb = verbOf(req.method ?? 'GET', info, url.searchParams.get('watch') === 'true');
    await authorize(ctx.registry, user, labels.verb, info);
    return serveResourceMetrics({ req, res, url, user, info, ctx });
  }
  if (!info?.def) throw resourceNotFound();
  labels.resource = info.plural;
  labels.subresource = info.subresource ?? '';
  labels.verb = verbOf(req.method ?? 'GET', info, url.searchParams.get('watch') === 'true');
  await authorize(ctx.registry, user, labels.verb, info);
  if (info.group === '' && info.plural === 'serviceaccounts' && info.subresource === 'token' && info.name && info.namespace) {
    if (req.method !== 'POST') throw new ApiError('MethodNotAllowed', `${req.method} is not supported on serviceaccounts/token: create a TokenRequest with POST`);
    return serveTokenRequest(req, res, ctx, info.namespace, info.name);
  }
  const scope: RequestScope = { req, res, url, user, info, ctx };
  await serveResource(scope);
}

/**
 * `POST /api/v1/namespaces/<ns>/bindings`: binds the pod the Binding's metadata.name names, as
 * `pods/<name>/binding` does (the official Python client's `create_namespaced_binding`, `kubectl create -f`).
 * @throws ApiError BadRequest without metadata.name; what pods/binding throws
 */
async function serveBinding(req: IncomingMessage, res: ServerResponse, ctx: ServerContext, url: URL, namespace: string): Promise<void> {
  const body = decodeBody(await readBody(req, ctx.maxBodyBytes), mediaType(req));
  const name = rec(rec(body).metadata).name;
  if (typeof name !== 'string' || name === '') throw badRequest('a Binding needs metadata.name (the pod to bind)');
  sendJson(res, 201, await bindPod(ctx.registry, namespace, name, body, { dryRun: url.searchParams.getAll('dryRun').includes('All') }));
}

interface Review {
  group: string;
  resource: string;
  namespace?: string;
  serve(req: IncomingMessage, res: ServerResponse, ctx: ServerContext, user: UserInfo): Promise<void>;
}

/** The POSTed reviews, by path. */
const REVIEWS: Record<string, Review> = {
  '/apis/authentication.k8s.io/v1/tokenreviews': { group: 'authentication.k8s.io', resource: 'tokenreviews', serve: (req, res, ctx) => serveTokenReview(req, res, ctx, ctx.maxBodyBytes) },
  '/apis/authentication.k8s.io/v1/selfsubjectreviews': { group: 'authentication.k8s.io', resource: 'selfsubjectreviews', serve: (req, res, ctx, user) => serveSelfSubjectReview(req, res, user, ctx.maxBodyBytes) },
  '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews': { group: 'authorization.k8s.io', resource: 'selfsubjectaccessreviews', serve: (req, res, ctx, user) => serveAccessReview(req, res, ctx, user, ctx.maxBodyBytes) },
  '/apis/authorization.k8s.io/v1/selfsubjectrulesreviews': { group: 'authorization.k8s.io', resource: 'selfsubjectrulesreviews', serve: (req, res, ctx, user) => serveRulesReview(req, res, ctx, user, ctx.maxBodyBytes) },
  '/apis/authorization.k8s.io/v1/subjectaccessreviews': { group: 'authorization.k8s.io', resource: 'subjectaccessreviews', serve: (req, res, ctx) => serveSubjectAccessReview(req, res, ctx, ctx.maxBodyBytes) },
};

/** `POST /apis/authorization.k8s.io/v1/namespaces/<ns>/localsubjectaccessreviews`. */
function localReview(path: string): Review | undefined {
  const m = /^\/apis\/authorization\.k8s\.io\/v1\/namespaces\/([^/]+)\/localsubjectaccessreviews$/.exec(path);
  if (!m) return undefined;
  const namespace = decodeURIComponent(m[1]!);
  return { group: 'authorization.k8s.io', resource: 'localsubjectaccessreviews', namespace, serve: (req, res, ctx) => serveSubjectAccessReview(req, res, ctx, ctx.maxBodyBytes, namespace) };
}

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
