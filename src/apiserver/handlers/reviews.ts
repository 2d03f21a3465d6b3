/**
 * The review resources, served without storage: TokenReview (kubelets check the API server's
 * token), SelfSubjectReview (`kubectl auth whoami`), SelfSubjectAccessReview (`kubectl auth can-i`),
 * SelfSubjectRulesReview (`kubectl auth can-i --list`), SubjectAccessReview and LocalSubjectAccessReview.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError, badRequest } from '../errors.ts';
import { rec } from '../registry/util.ts';
import type { AuthzResource } from '../auth/authorizer.ts';
import { nodeOfUser } from '../auth/node.ts';
import type { ServerContext, UserInfo } from './context.ts';
import { decodeBody, mediaType, readBody, sendJson } from './http.ts';

/** `POST /apis/authentication.k8s.io/v1/tokenreviews`: the user of a token, for kubelets checking the API server. */
export async function serveTokenReview(req: IncomingMessage, res: ServerResponse, ctx: ServerContext, limit: number): Promise<void> {
  const body = rec(decodeBody(await readBody(req, limit), mediaType(req)));
  if (body.kind !== undefined && body.kind !== 'TokenReview') throw badRequest(`the kind of the object (${String(body.kind)}) does not match TokenReview`);
  const token = rec(body.spec).token;
  if (typeof token !== 'string' || !token) {
    throw new ApiError('Invalid', 'TokenReview.authentication.k8s.io "" is invalid: spec.token: Required value', {
      group: 'authentication.k8s.io',
      kind: 'TokenReview',
      causes: [{ reason: 'FieldValueRequired', message: 'Required value', field: 'spec.token' }],
    });
  }
  const user = await ctx.authenticateToken(token);
  const status = user ? { authenticated: true, user: { username: user.name, ...(user.uid ? { uid: user.uid } : {}), groups: user.groups }, audiences: [] } : { authenticated: false, error: 'invalid bearer token' };
  sendJson(res, 201, { kind: 'TokenReview', apiVersion: 'authentication.k8s.io/v1', metadata: { creationTimestamp: null }, spec: { token }, status });
}

/** `POST selfsubjectreviews`: who the caller is. */
export async function serveSelfSubjectReview(req: IncomingMessage, res: ServerResponse, user: UserInfo, limit: number): Promise<void> {
  await readBody(req, limit);
  sendJson(res, 201, { kind: 'SelfSubjectReview', apiVersion: 'authentication.k8s.io/v1', metadata: { creationTimestamp: null }, status: { userInfo: { username: user.name, ...(user.uid ? { uid: user.uid } : {}), groups: user.groups, ...(user.extra ? { extra: user.extra } : {}) } } });
}

function accessAttributes(spec: Record<string, unknown>, namespace?: string): { verb: string; info?: AuthzResource; path?: string } {
  const nra = spec.nonResourceAttributes;
  if (nra !== undefined && nra !== null) {
    const n = rec(nra);
    return { verb: String(n.verb ?? ''), path: String(n.path ?? '') };
  }
  const ra = rec(spec.resourceAttributes);
  const s = (v: unknown) => (typeof v === 'string' && v ? v : undefined);
  return {
    verb: String(ra.verb ?? ''),
    info: { group: String(ra.group ?? ''), plural: String(ra.resource ?? ''), namespace: namespace ?? s(ra.namespace), name: s(ra.name), subresource: s(ra.subresource), subpath: '' },
  };
}

async function decideAccess(ctx: ServerContext, user: UserInfo, spec: Record<string, unknown>, namespace?: string): Promise<{ allowed: boolean; reason?: string }> {
  const a = accessAttributes(spec, namespace);
  if (a.info) {
    if (!a.info.plural) throw invalidReview('spec.resourceAttributes.resource', 'Required value');
    const d = await ctx.authorizer.decide(user, a.verb, a.info);
    return d.allowed ? { allowed: true, reason: user.groups.includes('system:masters') ? 'allowed by the system:masters group' : 'RBAC: allowed' } : { allowed: false, ...(d.reason ? { reason: d.reason } : {}) };
  }
  if (spec.resourceAttributes === undefined && spec.nonResourceAttributes === undefined) throw invalidReview('spec.resourceAttributes', 'exactly one of nonResourceAttributes or resourceAttributes must be specified');
  return { allowed: (await ctx.authorizer.decidePath(user, a.verb, a.path ?? '')).allowed };
}

function invalidReview(field: string, why: string): ApiError {
  return new ApiError('Invalid', `SubjectAccessReview.authorization.k8s.io "" is invalid: ${field}: ${why}`, {
    group: 'authorization.k8s.io',
    kind: 'SubjectAccessReview',
    causes: [{ reason: 'FieldValueRequired', message: why, field }],
  });
}

/** `POST selfsubjectaccessreviews` (`kubectl auth can-i`): whether the caller may do what the spec names. */
export async function serveAccessReview(req: IncomingMessage, res: ServerResponse, ctx: ServerContext, user: UserInfo, limit: number): Promise<void> {
  const body = rec(decodeBody(await readBody(req, limit), mediaType(req)));
  const spec = rec(body.spec);
  const status = await decideAccess(ctx, user, spec);
  sendJson(res, 201, { kind: 'SelfSubjectAccessReview', apiVersion: 'authorization.k8s.io/v1', metadata: { creationTimestamp: null }, spec, status });
}

/**
 * `POST subjectaccessreviews` and `namespaces/<ns>/localsubjectaccessreviews`: whether the user the spec
 * names (`user`, `groups`, `uid`, `extra`) may do what it names; a local review's namespace is its URL's.
 */
export async function serveSubjectAccessReview(req: IncomingMessage, res: ServerResponse, ctx: ServerContext, limit: number, namespace?: string): Promise<void> {
  const body = rec(decodeBody(await readBody(req, limit), mediaType(req)));
  const spec = rec(body.spec);
  const name = typeof spec.user === 'string' ? spec.user : '';
  const groups = Array.isArray(spec.groups) ? spec.groups.map(String) : [];
  if (!name && groups.length === 0) throw invalidReview('spec.user', 'at least one of user or group must be specified');
  if (namespace !== undefined) {
    const ns = rec(spec.resourceAttributes).namespace;
    if (ns !== undefined && ns !== '' && ns !== namespace) throw invalidReview('spec.resourceAttributes.namespace', `must match metadata.namespace: "${namespace}"`);
  }
  const subject: UserInfo = { name, groups, ...(typeof spec.uid === 'string' && spec.uid ? { uid: spec.uid } : {}) };
  const status = await decideAccess(ctx, subject, spec, namespace);
  const kind = namespace === undefined ? 'SubjectAccessReview' : 'LocalSubjectAccessReview';
  sendJson(res, 201, { kind, apiVersion: 'authorization.k8s.io/v1', metadata: { creationTimestamp: null, ...(namespace ? { namespace } : {}) }, spec, status });
}

/**
 * `POST selfsubjectrulesreviews` (`kubectl auth can-i --list`): the caller's rules in `spec.namespace`,
 * as RBAC grants them (`system:masters` has cluster-admin's through its binding). A kubelet's rules are
 * decided by the Node authorizer and are not listed: `incomplete` is then true.
 */
export async function serveRulesReview(req: IncomingMessage, res: ServerResponse, ctx: ServerContext, user: UserInfo, limit: number): Promise<void> {
  const body = rec(decodeBody(await readBody(req, limit), mediaType(req)));
  const spec = rec(body.spec);
  const namespace = typeof spec.namespace === 'string' ? spec.namespace : '';
  const rules = await ctx.authorizer.rbac.rulesFor(user, namespace || undefined);
  const resourceRules: Record<string, unknown>[] = [];
  const nonResourceRules: Record<string, unknown>[] = [];
  const seen = new Set<string>();
  for (const r of rules) {
    const key = JSON.stringify(r);
    if (seen.has(key)) continue;
    seen.add(key);
    if ((r.nonResourceURLs ?? []).length > 0) nonResourceRules.push({ verbs: r.verbs, nonResourceURLs: r.nonResourceURLs });
    else resourceRules.push({ verbs: r.verbs, apiGroups: r.apiGroups, resources: r.resources, ...((r.resourceNames ?? []).length ? { resourceNames: r.resourceNames } : {}) });
  }
  const node = nodeOfUser(user) !== undefined;
  sendJson(res, 201, {
    kind: 'SelfSubjectRulesReview',
    apiVersion: 'authorization.k8s.io/v1',
    metadata: { creationTimestamp: null },
    spec,
    status: { resourceRules, nonResourceRules, incomplete: node, ...(node ? { evaluationError: 'the Node authorizer decides a kubelet\'s requests: its rules are not listed' } : {}) },
  });
}
