/**
 * Authentication helpers (bearer tokens; the request's verb) and the door to the authorizer chain of
 * `../auth/` (system:masters, the Node authorizer, RBAC): `authorize(registry, user, verb, info)` asks
 * the authorizer of that registry's server.
 */
import type { IncomingMessage } from 'node:http';
import type { Logger } from '../../lib/index.ts';
import { Authorizer, type AuthzResource } from '../auth/authorizer.ts';
import { RbacAuthorizer } from '../auth/rbac.ts';
import type { Registry } from '../registry/store.ts';
import type { UserInfo } from './context.ts';
import type { ResourceRequest } from './router.ts';

/** The bearer token of a request, if any. */
export function bearerToken(req: IncomingMessage): string | undefined {
  const h = req.headers.authorization;
  if (!h) return undefined;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
  return m ? m[1] : undefined;
}

/** The Kubernetes verb of a request. */
export function verbOf(method: string, info: ResourceRequest, watch: boolean): string {
  switch (method) {
    case 'GET':
    case 'HEAD':
      return info.name === undefined ? (watch ? 'watch' : 'list') : 'get';
    case 'POST':
      return 'create';
    case 'PUT':
      return 'update';
    case 'PATCH':
      return 'patch';
    case 'DELETE':
      return info.name === undefined ? 'deletecollection' : 'delete';
    default:
      return method.toLowerCase();
  }
}

const authorizers = new WeakMap<Registry, Authorizer>();

/** Makes (and starts) the authorizer of a registry's server; the server stops its watches on close. */
export function createAuthorizer(registry: Registry, log: Logger): Authorizer {
  const rbac = new RbacAuthorizer(registry, log);
  rbac.start();
  const a = new Authorizer(registry, rbac);
  authorizers.set(registry, a);
  return a;
}

/** The authorizer of `registry` (made on first use for a registry no server made one for). */
export function authorizerOf(registry: Registry, log?: Logger): Authorizer {
  const a = authorizers.get(registry);
  if (a) return a;
  const quiet = { warn() {}, info() {}, debug() {}, error() {} } as unknown as Logger;
  return createAuthorizer(registry, log ?? quiet);
}

/**
 * Decides whether `user` may do `verb` on `info`.
 * @throws ApiError Forbidden with kube-apiserver's message
 */
export async function authorize(reg: Registry, user: UserInfo, verb: string, info: AuthzResource): Promise<void> {
  await authorizerOf(reg).authorize(user, verb, info);
}
