/**
 * The review resources, served without storage: TokenReview (kubelets check the API server's
 * token), SelfSubjectReview (`kubectl auth whoami`) and SelfSubjectAccessReview (`kubectl auth can-i`).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ApiError, badRequest } from '../errors.ts';
import type { Registry } from '../registry/store.ts';
import { rec } from '../registry/util.ts';
import { authorize } from './auth.ts';
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
  const user = ctx.authenticateToken(token);
  const status = user ? { authenticated: true, user: { username: user.name, groups: user.groups }, audiences: [] } : { authenticated: false, error: 'invalid bearer token' };
  sendJson(res, 201, { kind: 'TokenReview', apiVersion: 'authentication.k8s.io/v1', metadata: { creationTimestamp: null }, spec: { token }, status });
}

/** `POST selfsubjectreviews`: who the caller is. */
export async function serveSelfSubjectReview(req: IncomingMessage, res: ServerResponse, user: UserInfo, limit: number): Promise<void> {
  await readBody(req, limit);
  sendJson(res, 201, { kind: 'SelfSubjectReview', apiVersion: 'authentication.k8s.io/v1', metadata: { creationTimestamp: null }, status: { userInfo: { username: user.name, groups: user.groups } } });
}

/** `POST selfsubjectaccessreviews` (`kubectl auth can-i`): whether the caller may do what the spec names. */
export async function serveAccessReview(req: IncomingMessage, res: ServerResponse, registry: Registry, user: UserInfo, limit: number): Promise<void> {
  const body = rec(decodeBody(await readBody(req, limit), mediaType(req)));
  const spec = rec(body.spec);
  const ra = rec(spec.resourceAttributes);
  let allowed = false;
  let reason = '';
  if (spec.nonResourceAttributes !== undefined) {
    allowed = true; // every authenticated user may read discovery, OpenAPI, health and version
  } else {
    const plural = String(ra.resource ?? '');
    const group = String(ra.group ?? '');
    const info = {
      group,
      version: String(ra.version ?? ''),
      plural,
      def: undefined,
      namespace: typeof ra.namespace === 'string' && ra.namespace ? ra.namespace : undefined,
      name: typeof ra.name === 'string' && ra.name ? ra.name : undefined,
      subresource: typeof ra.subresource === 'string' && ra.subresource ? ra.subresource : undefined,
      subpath: '',
      trailingSlash: false,
    };
    try {
      authorize(registry, user, String(ra.verb ?? ''), info);
      allowed = true;
    } catch (err: unknown) {
      reason = err instanceof Error ? err.message : String(err);
    }
  }
  sendJson(res, 201, { kind: 'SelfSubjectAccessReview', apiVersion: 'authorization.k8s.io/v1', metadata: { creationTimestamp: null }, spec, status: { allowed, ...(reason ? { reason } : {}) } });
}

