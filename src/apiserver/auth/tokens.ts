/**
 * ServiceAccount tokens: `POST .../serviceaccounts/<name>/token` (TokenRequest, `kubectl create token
 * [--audience A] [--duration D] [--bound-object-kind Pod --bound-object-name P]`) mints a bound token for
 * `system:serviceaccount:<ns>:<name>` (groups `system:serviceaccounts`, `system:serviceaccounts:<ns>`),
 * signed with the server's token key; the API server accepts it while it has not expired, names the API
 * server's audience, and its ServiceAccount (and bound Pod or Secret) still exists with the uid it was
 * issued for, as kube-apiserver's bound service account tokens.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError, badRequest } from '../errors.ts';
import type { ServerContext, UserInfo } from '../handlers/context.ts';
import { decodeBody, mediaType, readBody, sendJson } from '../handlers/http.ts';
import { secrets, serviceaccounts } from '../registry/core/index.ts';
import { pods } from '../registry/pods/index.ts';
import type { Registry } from '../registry/store.ts';
import { rec } from '../registry/util.ts';
import type { TokenUser } from '../pki.ts';

/** The audience of the API server itself (kube-apiserver's default `--api-audiences`, its issuer). */
export const API_AUDIENCE = 'https://kubernetes.default.svc.cluster.local';
/** A TokenRequest's default `expirationSeconds` (1 h) and the shortest one kube-apiserver takes (10 min). */
export const DEFAULT_TOKEN_SECONDS = 3600;
export const MIN_TOKEN_SECONDS = 600;
/** The longest: 2^32 s, as kube-apiserver's validation bounds it. */
export const MAX_TOKEN_SECONDS = 2 ** 32;

/** The user of ServiceAccount `namespace/name`. */
export function serviceAccountUser(namespace: string, name: string, uid?: string): UserInfo {
  return { name: `system:serviceaccount:${namespace}:${name}`, ...(uid ? { uid } : {}), groups: ['system:serviceaccounts', `system:serviceaccounts:${namespace}`, 'system:authenticated'] };
}

/** Whether a token's claims hold now: not expired, for the API server, its account and bound object alive (by uid). */
export async function checkTokenBinding(registry: Registry, user: TokenUser, audience = API_AUDIENCE): Promise<boolean> {
  if (user.expiresAt !== undefined && Date.now() / 1000 >= user.expiresAt) return false;
  if (user.audiences !== undefined && !user.audiences.includes(audience)) return false;
  const sa = user.serviceAccount;
  if (sa) {
    if ((await registry.find(serviceaccounts, sa.namespace, sa.name))?.metadata.uid !== sa.uid) return false;
    const obj = user.boundObject;
    if (obj) {
      const def = obj.kind === 'Pod' ? pods : secrets;
      if ((await registry.find(def, sa.namespace, obj.name))?.metadata.uid !== obj.uid) return false;
    }
  }
  return true;
}

function invalid(name: string, field: string, value: unknown, why: string): ApiError {
  return new ApiError('Invalid', `TokenRequest.authentication.k8s.io "${name}" is invalid: ${field}: Invalid value: ${JSON.stringify(value)}: ${why}`, {
    name,
    group: 'authentication.k8s.io',
    kind: 'TokenRequest',
    causes: [{ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(value)}: ${why}`, field }],
  });
}

/**
 * `POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`: answers 201 with the TokenRequest and
 * `status.token`, `status.expirationTimestamp`.
 * @throws ApiError NotFound (no such account or bound object), Invalid (duration, bound object kind or uid), BadRequest
 */
export async function serveTokenRequest(req: IncomingMessage, res: ServerResponse, ctx: ServerContext, namespace: string, name: string): Promise<void> {
  const body = rec(decodeBody(await readBody(req, ctx.maxBodyBytes), mediaType(req)));
  if (body.kind !== undefined && body.kind !== 'TokenRequest') throw badRequest(`the kind of the object (${String(body.kind)}) does not match TokenRequest`);
  const sa = await ctx.registry.get(serviceaccounts, namespace, name);
  const spec = rec(body.spec);
  const seconds = spec.expirationSeconds === undefined || spec.expirationSeconds === null ? DEFAULT_TOKEN_SECONDS : Number(spec.expirationSeconds);
  if (!Number.isInteger(seconds) || seconds < MIN_TOKEN_SECONDS) throw invalid(name, 'spec.expirationSeconds', spec.expirationSeconds, 'may not specify a duration less than 10 minutes');
  if (seconds > MAX_TOKEN_SECONDS) throw invalid(name, 'spec.expirationSeconds', spec.expirationSeconds, 'may not specify a duration larger than 2^32 seconds');
  const audiences = Array.isArray(spec.audiences) && spec.audiences.length > 0 ? spec.audiences.map(String) : [API_AUDIENCE];
  let boundObject: { kind: string; name: string; uid: string } | undefined;
  const ref = rec(spec.boundObjectRef);
  if (spec.boundObjectRef) {
    const kind = String(ref.kind ?? '');
    if (kind !== 'Pod' && kind !== 'Secret') throw invalid(name, 'spec.boundObjectRef.kind', kind, 'supported values: "Pod", "Secret"');
    const obj = await ctx.registry.get(kind === 'Pod' ? pods : secrets, namespace, String(ref.name ?? ''));
    if (ref.uid && ref.uid !== obj.metadata.uid) throw new ApiError('Conflict', `the UID in the bound object reference (${String(ref.uid)}) does not match the UID in record. The object might have been deleted and then recreated`);
    boundObject = { kind, name: obj.metadata.name!, uid: obj.metadata.uid! };
  }
  const expiresAt = Math.floor(Date.now() / 1000) + seconds;
  const user = serviceAccountUser(namespace, name, sa.metadata.uid);
  const token = ctx.mintToken(user, { serviceAccount: { namespace, name, uid: sa.metadata.uid! }, boundObject, audiences, expiresAt });
  const boundObjectRef = boundObject ? { kind: boundObject.kind, apiVersion: 'v1', name: boundObject.name, uid: boundObject.uid } : undefined;
  sendJson(res, 201, {
    kind: 'TokenRequest',
    apiVersion: 'authentication.k8s.io/v1',
    metadata: { name, namespace, creationTimestamp: null },
    spec: { audiences, expirationSeconds: seconds, boundObjectRef: boundObjectRef ?? null },
    status: { token, expirationTimestamp: new Date(expiresAt * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z') },
  });
}
