/**
 * The authorizer chain of every request, in kube-apiserver's order: `system:masters` may do anything
 * (the group's privilege is built in, as there), then the Node authorizer for kubelets, then RBAC. A
 * refusal is a 403 Forbidden `metav1.Status` in kube-apiserver's words:
 * `pods is forbidden: User "x" cannot list resource "pods" in API group "" in the namespace "default"`.
 */
import { ApiError } from '../errors.ts';
import type { UserInfo } from '../handlers/context.ts';
import type { ResourceRequest } from '../handlers/router.ts';
import type { Registry } from '../registry/store.ts';
import { authorizeNode, nodeOfUser } from './node.ts';
import type { RbacAuthorizer } from './rbac.ts';

/** A decision and, when refused, the reason appended to the message (empty for RBAC, as in Kubernetes). */
export interface Decision {
  allowed: boolean;
  reason: string;
}

/** A resource request's attributes with only what authorization needs. */
export type AuthzResource = Pick<ResourceRequest, 'group' | 'plural' | 'namespace' | 'name' | 'subresource' | 'subpath'>;

/** The one authorizer of an API server. */
export class Authorizer {
  readonly #registry: Registry;
  readonly rbac: RbacAuthorizer;
  constructor(registry: Registry, rbac: RbacAuthorizer) {
    this.#registry = registry;
    this.rbac = rbac;
  }

  /** Whether `user` may do `verb` on a resource. */
  async decide(user: UserInfo, verb: string, info: AuthzResource): Promise<Decision> {
    if (user.groups.includes('system:masters')) return { allowed: true, reason: '' };
    let reason = '';
    const node = nodeOfUser(user);
    if (node !== undefined) {
      const d = await authorizeNode(this.#registry, node, verb, { ...info, version: '', def: undefined, trailingSlash: false });
      if (d.allowed) return { allowed: true, reason: '' };
      reason = d.reason;
    }
    const allowed = await this.rbac.allows(user, {
      verb,
      resource: { group: info.group, resource: info.plural, subresource: info.subresource, namespace: info.namespace, name: info.name },
    });
    return allowed ? { allowed: true, reason: '' } : { allowed: false, reason };
  }

  /** Whether `user` may do `verb` (get, post...) on a non-resource path (`/metrics`, `/healthz`). */
  async decidePath(user: UserInfo, verb: string, path: string): Promise<Decision> {
    if (user.groups.includes('system:masters')) return { allowed: true, reason: '' };
    return { allowed: await this.rbac.allows(user, { verb, path }), reason: '' };
  }

  /**
   * Refuses what `user` may not do.
   * @throws ApiError Forbidden with kube-apiserver's message
   */
  async authorize(user: UserInfo, verb: string, info: AuthzResource): Promise<void> {
    const d = await this.decide(user, verb, info);
    if (!d.allowed) throw forbidden(user, verb, info, d.reason);
  }

  /** @throws ApiError Forbidden `forbidden: User "x" cannot get path "/metrics"` */
  async authorizePath(user: UserInfo, verb: string, path: string): Promise<void> {
    if (!(await this.decidePath(user, verb, path)).allowed) throw new ApiError('Forbidden', `forbidden: User "${user.name}" cannot ${verb} path "${path}"`);
  }
}

/** The message of a refusal, as kube-apiserver's `forbiddenMessage` words it. */
export function forbiddenMessage(user: UserInfo, verb: string, info: AuthzResource, reason = ''): string {
  const res = info.subresource ? `${info.plural}/${info.subresource}` : info.plural;
  const where = info.namespace ? `in the namespace "${info.namespace}"` : 'at the cluster scope';
  // The qualified resource leads, as `NewForbidden` writes it: `deployments.apps "web" is forbidden: ...`.
  const qualified = info.group ? `${info.plural}.${info.group}` : info.plural;
  const subject = info.name ? `${qualified} "${info.name}"` : qualified;
  return `${subject} is forbidden: User "${user.name}" cannot ${verb} resource "${res}" in API group "${info.group}" ${where}${reason ? `: ${reason}` : ''}`;
}

/** A 403 Forbidden for `user` doing `verb` on `info`. */
export function forbidden(user: UserInfo, verb: string, info: AuthzResource, reason = ''): ApiError {
  return new ApiError('Forbidden', forbiddenMessage(user, verb, info, reason), {
    name: info.name,
    group: info.group || undefined,
    kind: info.plural,
  });
}
