/**
 * The Node authorizer and NodeRestriction (kube-apiserver's `--authorization-mode=Node` and the
 * `NodeRestriction` admission plugin) for kubelets, users `system:node:<name>` in group
 * `system:nodes`. A kubelet reads the cluster's pods, nodes, services, endpoints and the like; it reads
 * a Secret or ConfigMap only by name and only when a pod bound to it names it (volumes, projected
 * sources, env, envFrom, imagePullSecrets), and a Checkpoint's data only while a pod bound to it
 * restores from that Checkpoint (seed: a snapshot has a Secret's access rules). It writes its own Node
 * and status, its own Lease in `kube-node-lease`, the status of the pods bound to it (and deletes and
 * evicts those), events, TokenReviews, and POSTs to other kubelets' `publish/` endpoints through the node
 * proxy (channel fan-out).
 */
import { ANNOTATIONS } from '../../api/index.ts';
import { checkpoints } from '../registry/checkpoints/index.ts';
import { pods } from '../registry/pods/index.ts';
import type { Registry } from '../registry/store.ts';
import { arr, rec } from '../registry/util.ts';
import { nodeGraphOf } from './node-graph.ts';
import type { KubeObject } from '../storage/index.ts';
import type { UserInfo } from '../handlers/context.ts';
import type { ResourceRequest } from '../handlers/router.ts';

/** The node a user is the kubelet of, or undefined. */
export function nodeOfUser(user: UserInfo): string | undefined {
  return user.groups.includes('system:nodes') && user.name.startsWith('system:node:') ? user.name.slice('system:node:'.length) : undefined;
}

/** A Node authorizer decision: allowed, or refused with the reason kube-apiserver appends to the message. */
export type NodeDecision = { allowed: true } | { allowed: false; reason: string };

const ALLOW: NodeDecision = { allowed: true };
const deny = (reason = ''): NodeDecision => ({ allowed: false, reason });

/** The Secrets (`secret`) or ConfigMaps (`configMap`) a pod's spec names. */
export function podReferences(pod: KubeObject, kind: 'secret' | 'configMap'): Set<string> {
  const spec = rec(pod.spec);
  const out = new Set<string>();
  const add = (v: unknown) => {
    if (typeof v === 'string' && v) out.add(v);
  };
  for (const v of arr(spec.volumes)) {
    if (kind === 'secret') add(rec(v.secret).secretName);
    else add(rec(v.configMap).name);
    for (const src of arr(rec(v.projected).sources)) add(rec(src[kind]).name);
  }
  for (const c of [...arr(spec.containers), ...arr(spec.initContainers), ...arr(spec.ephemeralContainers)]) {
    for (const e of arr(c.env)) add(rec(rec(e.valueFrom)[kind === 'secret' ? 'secretKeyRef' : 'configMapKeyRef']).name);
    for (const e of arr(c.envFrom)) add(rec(e[kind === 'secret' ? 'secretRef' : 'configMapRef']).name);
  }
  if (kind === 'secret') for (const s of arr(spec.imagePullSecrets)) add(s.name);
  return out;
}

/**
 * Decides a kubelet's request. Reads (get, list, watch) of anything but Secrets, ConfigMaps, Checkpoint
 * data, logs and proxies are allowed, as the `system:node` role allows them.
 */
export async function authorizeNode(reg: Registry, node: string, verb: string, info: ResourceRequest): Promise<NodeDecision> {
  const read = verb === 'get' || verb === 'list' || verb === 'watch';
  const key = `${info.group}/${info.plural}`;
  const sub = info.subresource;
  const ns = info.namespace ?? '';
  if (key === 'authentication.k8s.io/tokenreviews' && verb === 'create') return ALLOW;
  if (key === 'authorization.k8s.io/subjectaccessreviews' && verb === 'create') return ALLOW;
  if (key === 'authorization.k8s.io/selfsubjectaccessreviews' || key === 'authorization.k8s.io/selfsubjectrulesreviews' || key === 'authentication.k8s.io/selfsubjectreviews') {
    return verb === 'create' ? ALLOW : deny();
  }
  if (read && key === 'kube32.io/checkpoints' && sub === 'data') {
    const restores = (p: KubeObject | undefined) => p !== undefined && rec(p.spec).nodeName === node && p.metadata.annotations?.[ANNOTATIONS.restoreFrom] === info.name;
    // The pod a move replaced keeps its name, which the Checkpoint records: read it alone first
    // (a list of every pod of the namespace for each restore was 20 MB at 10 000 pods).
    const ckpt = await reg.find(checkpoints, ns, info.name ?? '');
    const podName = rec(ckpt?.spec).podName;
    if (typeof podName === 'string' && restores(await reg.find(pods, ns, podName))) return ALLOW;
    // Any other pod bound to this node may restore from it too (a pod created with the annotation):
    // the graph's pods of this node, each read by name to confirm (not a list of the namespace).
    for (const p of (await nodeGraphOf(reg.storage, podReferences)).podsOn(ns, node)) {
      if (p.restoreFrom === info.name && p.name !== podName && restores(await reg.find(pods, ns, p.name))) return ALLOW;
    }
    return deny(`no pod bound to node "${node}" restores from this Checkpoint`);
  }
  if (read && (key === '/secrets' || key === '/configmaps') && sub === undefined) {
    const what = key === '/secrets' ? 'secret' : 'configMap';
    if (verb !== 'get' || !info.name) return deny(`a node may only get ${info.plural} by name`);
    const name = info.name;
    // The graph's pods of this node (kube's node authorizer graph), not a list of every pod of the namespace.
    for (const p of (await nodeGraphOf(reg.storage, podReferences)).podsOn(ns, node)) {
      if ((what === 'secret' ? p.secrets : p.configMaps).has(name)) return ALLOW;
    }
    return deny(`no relationship found between node '${node}' and this object`);
  }
  if (read && sub !== 'proxy' && sub !== 'log' && key !== '/secrets' && key !== '/configmaps') return ALLOW;
  switch (key) {
    case '/nodes':
      if (info.name === node && sub !== 'proxy') return ALLOW;
      // Kubelets fan channel messages out to each other through the node proxy (kube32-sim's publish endpoint).
      if (sub === 'proxy' && verb === 'create' && info.subpath.startsWith('publish/')) return ALLOW;
      if (verb === 'create' && sub === undefined) return ALLOW; // the name is checked against the body by the handler (NodeRestriction)
      return deny(`node "${node}" may only change its own Node object`);
    case 'coordination.k8s.io/leases':
      if (info.namespace === 'kube-node-lease' && (info.name === node || (verb === 'create' && info.name === undefined))) return ALLOW;
      return deny(`node "${node}" may only change its own Lease in kube-node-lease`);
    case '/events':
    case 'events.k8s.io/events':
      if (verb === 'create' || verb === 'patch' || verb === 'update') return ALLOW;
      break;
    case '/pods': {
      if (!info.name || !(sub === 'status' || sub === 'eviction' || (sub === undefined && verb === 'delete'))) break;
      const pod = await reg.find(pods, ns, info.name);
      if (!pod) return ALLOW; // NotFound follows
      if (rec(pod.spec).nodeName === node) return ALLOW;
      return deny(`pod is not bound to node "${node}"`);
    }
  }
  return deny();
}
