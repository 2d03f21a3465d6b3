/**
 * Authentication (bearer tokens; no token on the plain-HTTP loopback mode means the admin) and
 * authorization: `system:masters` may do anything; a kubelet (`system:node:<name>`, group
 * `system:nodes`) may read, write its own Node (and its status), its own Lease in
 * `kube-node-lease`, events, the status of pods bound to it, delete and evict those pods, POST to
 * other kubelets' `publish/` endpoints through the node proxy (channel fan-out), and review tokens — as Kubernetes' Node authorizer and NodeRestriction admission allow.
 */
import type { IncomingMessage } from 'node:http';
import { ApiError } from '../errors.ts';
import type { KubeObject } from '../storage/index.ts';
import { checkpoints } from '../registry/checkpoints/index.ts';
import { pods } from '../registry/pods/index.ts';
import type { Registry } from '../registry/store.ts';
import { rec } from '../registry/util.ts';
import type { UserInfo } from './context.ts';
import type { ResourceRequest } from './router.ts';
import { ANNOTATIONS } from '../../api/index.ts';

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

function forbidden(user: UserInfo, verb: string, info: ResourceRequest, why = ''): ApiError {
  const res = info.subresource ? `${info.plural}/${info.subresource}` : info.plural;
  const where = info.namespace ? `in the namespace "${info.namespace}"` : 'at the cluster scope';
  const subject = info.name ? `${info.plural} "${info.name}"` : info.plural;
  return new ApiError('Forbidden', `${subject} is forbidden: User "${user.name}" cannot ${verb} resource "${res}" in API group "${info.group}" ${where}${why ? `: ${why}` : ''}`, {
    name: info.name,
    group: info.group || undefined,
    kind: info.plural,
  });
}

/**
 * Decides whether `user` may do `verb` on `info`.
 * @throws ApiError Forbidden
 */
export function authorize(reg: Registry, user: UserInfo, verb: string, info: ResourceRequest): void {
  if (user.groups.includes('system:masters')) return;
  const node = user.groups.includes('system:nodes') && user.name.startsWith('system:node:') ? user.name.slice('system:node:'.length) : undefined;
  if (node === undefined) throw forbidden(user, verb, info);
  const read = verb === 'get' || verb === 'list' || verb === 'watch';
  const key = `${info.group}/${info.plural}`;
  const sub = info.subresource;
  if (key === 'authentication.k8s.io/tokenreviews' && verb === 'create') return;
  if (read && key === 'kube32.io/checkpoints' && sub === 'data') {
    // Snapshot data has a Secret's rules: a node reads only the data a pod bound to it restores from.
    const restores = (p: KubeObject | undefined) => p !== undefined && rec(p.spec).nodeName === node && p.metadata.annotations?.[ANNOTATIONS.restoreFrom] === info.name;
    // The pod a move replaced keeps its name, which the Checkpoint records: read it alone first
    // (a list of every pod of the namespace for each restore was 20 MB at 10 000 pods).
    const ckpt = reg.find(checkpoints, info.namespace ?? '', info.name ?? '');
    const podName = rec(ckpt?.spec).podName;
    if (typeof podName === 'string' && restores(reg.find(pods, info.namespace ?? '', podName))) return;
    // Any other pod may restore from it too (a pod created with the annotation): look through them.
    if (reg.list(pods, info.namespace ?? '').items.some(restores)) return;
    throw forbidden(user, verb, info, `no pod bound to node "${node}" restores from this Checkpoint`);
  }
  if (read && sub !== 'proxy' && sub !== 'log') {
    if (key === '/secrets' && verb !== 'get') throw forbidden(user, verb, info, 'a node may only get secrets by name');
    return;
  }
  switch (key) {
    case '/nodes':
      if (info.name === node && sub !== 'proxy') return;
      // Kubelets fan channel messages out to each other through the node proxy (kube32-sim's publish endpoint).
      if (sub === 'proxy' && verb === 'create' && info.subpath.startsWith('publish/')) return;
      if (verb === 'create' && sub === undefined) return; // the name is checked against the body by the handler
      throw forbidden(user, verb, info, `node "${node}" may only change its own Node object`);
    case 'coordination.k8s.io/leases':
      if (info.namespace === 'kube-node-lease' && (info.name === node || (verb === 'create' && info.name === undefined))) return;
      throw forbidden(user, verb, info, `node "${node}" may only change its own Lease in kube-node-lease`);
    case '/events':
      if (verb === 'create' || verb === 'patch' || verb === 'update') return;
      break;
    case '/pods': {
      if (!info.name || !(sub === 'status' || sub === 'eviction' || (sub === undefined && verb === 'delete'))) break;
      const pod = reg.find(pods, info.namespace ?? '', info.name);
      if (!pod) return; // NotFound follows
      if (rec(pod.spec).nodeName === node) return;
      throw forbidden(user, verb, info, `pod is not bound to node "${node}"`);
    }
  }
  throw forbidden(user, verb, info);
}
