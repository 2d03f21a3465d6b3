/**
 * The binding subresource (`POST pods/<name>/binding`, v1 Binding): how a scheduler assigns a pod
 * to a node. It sets `spec.nodeName` once and the condition PodScheduled True.
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { runtimeMismatch } from '../../../api/index.ts';
import { ApiError, badRequest, conflict, type Status, successStatus } from '../../errors.ts';
import { nodes } from '../nodes/index.ts';
import { timestamp } from '../meta.ts';
import type { KubeObject } from '../../storage/index.ts';
import type { Registry } from '../store.ts';
import { arr, rec } from '../util.ts';
import { pods } from './index.ts';

/**
 * Binds a pod to a node.
 * @throws ApiError NotFound, Conflict (already bound, or being deleted), BadRequest (no target)
 */
export async function bindPod(reg: Registry, namespace: string, name: string, body: unknown, opts: { dryRun?: boolean } = {}): Promise<Status> {
  const b = rec(body);
  const target = rec(b.target);
  if (typeof target.name !== 'string' || !target.name) throw badRequest('a Binding needs target.name (the node)');
  if (target.kind !== undefined && target.kind !== 'Node') throw badRequest(`a Binding's target must be a Node, not ${String(target.kind)}`);
  const uid = rec(b.metadata).uid;
  const mutate = async (pod: KubeObject) => {
    if (uid && pod.metadata.uid !== uid) throw conflict('pods', '', name, `Precondition failed: UID in precondition: ${String(uid)}, UID in object meta: ${pod.metadata.uid}`);
    if (pod.metadata.deletionTimestamp) throw conflict('pods', '', name, 'pod is being deleted, cannot be assigned to a host');
    const spec = rec(pod.spec);
    if (spec.nodeName) throw conflict('pods', '', name, `pod ${name} is already assigned to node "${String(spec.nodeName)}"`);
    // A pod on a node of the other runtime would never run there (issue 18): refused, saying which runs what.
    const node = await reg.find(nodes, '', String(target.name));
    const why = node ? runtimeMismatch(pod as V1Pod, node as V1Node) : undefined;
    if (why) throw new ApiError('Forbidden', `pods "${name}" is forbidden: cannot bind to node "${String(target.name)}": ${why}`, { name, kind: 'pods' });
    spec.nodeName = target.name;
    pod.spec = spec;
    const status = rec(pod.status);
    const conds = arr(status.conditions).filter((c) => c.type !== 'PodScheduled');
    conds.push({ type: 'PodScheduled', status: 'True', lastProbeTime: null, lastTransitionTime: timestamp(reg.now()) });
    status.conditions = conds;
    pod.status = status;
    return pod;
  };
  if (opts.dryRun) await mutate(await reg.get(pods, namespace, name));
  else await reg.serverUpdate(pods, namespace, name, mutate);
  return successStatus(201);
}
