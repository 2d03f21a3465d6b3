/**
 * The eviction subresource (`POST pods/<name>/eviction`, policy/v1 Eviction; seed 002 "Drain and
 * evictions"). PodDisruptionBudgets are honoured first, as kube-apiserver does (eviction-budget.ts: the
 * budget's status checked and written with the pod in `disruptedPods`, bound to its resourceVersion; 429
 * TooManyRequests when it allows no disruption). Then a pod that is
 * Running on a node, whose `kube32.io/migration` is not `Never` and that no DaemonSet owns, is
 * MOVED: a `kube32.io/v1` Checkpoint `<pod>-evict-<first 8 characters of the pod's uid>` with
 * `spec {podName, action: Move}` and label `kube32.io/trigger: eviction` is created (idempotently)
 * for the checkpoint controller, but only when some other node can take the pod now (the scheduler's
 * {@link pickNode}, the pod's own node excluded): otherwise such a move could only fail before the
 * replacement, so the pod is deleted as an eviction deletes it, so that the drain completes (seed 002),
 * with a Warning event `MoveFailed` on the pod saying why no node could take it and that its state is
 * lost. Any other pod, or one whose eviction Checkpoint has Failed
 * (a move that failed after it was accepted: seed "When a move that an eviction asked for fails before
 * the replacement, the pod is deleted"), is deleted gracefully, as Kubernetes' eviction deletes it.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { ANNOTATIONS, LABELS, pickNode } from '../../../api/index.ts';
import { ApiError, badRequest, type Status, successStatus } from '../../errors.ts';
import type { KubeObject } from '../../storage/index.ts';
import { checkpoints } from '../checkpoints/index.ts';
import { events } from '../core/index.ts';
import type { DeleteOptions, Registry } from '../store.ts';
import { rec } from '../util.ts';
import { checkDisruptionBudgets } from './eviction-budget.ts';
import { pods } from './index.ts';
import { nodesOf, nodeUsageOf } from './node-usage.ts';

/** The annotation of a pod's migration policy. */
export const MIGRATION_ANNOTATION = ANNOTATIONS.migration;
/** The label telling what created a Checkpoint. */
export const TRIGGER_LABEL = LABELS.trigger;

/** The name of the Checkpoint an eviction creates for `pod`. */
export function evictionCheckpointName(pod: KubeObject): string {
  const short = (pod.metadata.uid ?? '').replace(/-/g, '').slice(0, 8);
  const suffix = `-evict-${short}`;
  return `${pod.metadata.name!.slice(0, 253 - suffix.length)}${suffix}`;
}

/** Whether an eviction moves `pod` rather than deleting it. */
export function evictionMoves(pod: KubeObject): boolean {
  const spec = rec(pod.spec);
  if (!spec.nodeName || rec(pod.status).phase !== 'Running' || pod.metadata.deletionTimestamp) return false;
  if (pod.metadata.annotations?.[MIGRATION_ANNOTATION] === 'Never') return false;
  return !(pod.metadata.ownerReferences ?? []).some((o) => o.kind === 'DaemonSet' && o.controller === true);
}

/**
 * Whether a pod an eviction would move has somewhere to go: the node the scheduler would pick for it among
 * the other nodes (Ready, schedulable, untainted or tolerated, matching its `nodeSelector`, with its host
 * ports free and its memory request), from the per-node sums the API server keeps ({@link nodeUsageOf}).
 * @returns why none can take it (`no node can take it: 0/2 nodes are available: ...`), or undefined when one can
 */
export async function moveTargetProblem(reg: Registry, pod: KubeObject): Promise<string | undefined> {
  const source = String(rec(pod.spec).nodeName ?? '');
  // The Nodes and what each node's pods take, kept from the storage watch: O(nodes) a check, not a read
  // of every pod and every Node.
  const allNodes = await nodesOf(reg.storage);
  const usage = await nodeUsageOf(reg.storage);
  const placement = pickNode(pod as unknown as V1Pod, allNodes, [], { usage, exclude: new Map([[source, "node(s) were the pod's own node"]]) });
  if (placement.nodeName !== undefined) return undefined;
  return `no node can take it: ${placement.message.replace(/\.$/, '')}`;
}

/**
 * Evicts a pod.
 * @param body the Eviction (its name must be the pod's; `deleteOptions` are used for a deletion)
 * @returns the 201 Status of an accepted eviction
 * @throws ApiError NotFound, BadRequest, TooManyRequests (a disruption budget). A pod that would move and that
 *   no other node can take ({@link moveTargetProblem}) is deleted as an eviction deletes it (seed 002).
 */
export async function evictPod(reg: Registry, namespace: string, name: string, body: unknown, opts: { dryRun?: boolean } = {}): Promise<Status> {
  const ev = rec(body);
  if (ev.kind !== undefined && ev.kind !== 'Eviction') throw badRequest(`the kind of the object (${String(ev.kind)}) does not match Eviction`);
  const evName = rec(ev.metadata).name;
  if (evName !== undefined && evName !== name) throw badRequest(`name in URL does not match name in Eviction object`);
  const pod = await reg.get(pods, namespace, name);
  const delOpts = rec(ev.deleteOptions) as DeleteOptions;
  if (delOpts.preconditions?.uid && delOpts.preconditions.uid !== pod.metadata.uid) {
    throw new ApiError('Conflict', `Operation cannot be fulfilled on pods "${name}": Precondition failed: UID in precondition: ${delOpts.preconditions.uid}, UID in object meta: ${pod.metadata.uid}`, { name, kind: 'pods' });
  }
  // A move this eviction already asked for that Failed means the pod cannot move: it is deleted, as the seed says.
  const existing = await reg.find(checkpoints, namespace, evictionCheckpointName(pod));
  const failed = rec(existing?.status).phase === 'Failed';
  // A move already accepted and under way is this eviction again (a retry): 201 without spending the budget twice.
  if (existing && !failed && evictionMoves(pod)) return successStatus(201);
  // The budget (kube's check-and-decrement of its status) before the pod is moved or deleted; a pod whose
  // accepted move failed is already counted in the budget's disruptedPods and is not counted again.
  if (!pod.metadata.deletionTimestamp) await checkDisruptionBudgets(reg, pod, { dryRun: opts.dryRun, allowCounted: failed });
  // A move no other node can take fails before the replacement: the pod is deleted as an eviction deletes it,
  // so that the drain completes (seed 002 "Drain and evictions"), without a Checkpoint that could only fail.
  const noTarget = evictionMoves(pod) && !failed && !existing ? await moveTargetProblem(reg, pod) : undefined;
  if (evictionMoves(pod) && !failed && !noTarget) {
    const ckpt = {
      metadata: { name: evictionCheckpointName(pod), namespace, labels: { [TRIGGER_LABEL]: 'eviction' } },
      spec: { podName: name, action: 'Move' },
    };
    if (!existing) {
      try {
        await reg.create(checkpoints, namespace, ckpt, { dryRun: opts.dryRun });
      } catch (err: unknown) {
        if (!(err instanceof ApiError && err.reason === 'AlreadyExists')) throw err;
      }
    }
    return successStatus(201);
  }
  await reg.delete(pods, namespace, name, { ...delOpts, dryRun: opts.dryRun, preconditions: { uid: pod.metadata.uid } });
  if (noTarget !== undefined && !opts.dryRun) await recordNoTarget(reg, pod, noTarget);
  return successStatus(201);
}

let eventSeq = 0;

/**
 * The Warning event on a movable pod that an eviction deleted because no node could take it (`kubectl
 * describe pod`, `kubectl get events`): `MoveFailed`, as a move that fails later says it. A failure to
 * write it does not undo the eviction (the pod is already being deleted).
 */
async function recordNoTarget(reg: Registry, pod: KubeObject, problem: string): Promise<void> {
  const now = new Date();
  const stamp = now.toISOString().replace(/\.\d{3}Z$/, 'Z');
  const name = pod.metadata.name ?? '';
  try {
    await reg.create(events, pod.metadata.namespace ?? 'default', {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { name: `${name}.${now.getTime().toString(16)}${(++eventSeq).toString(16)}` },
      involvedObject: { apiVersion: 'v1', kind: 'Pod', namespace: pod.metadata.namespace, name, uid: pod.metadata.uid, resourceVersion: pod.metadata.resourceVersion },
      reason: 'MoveFailed',
      message: `Evicted without a move, its state lost: ${problem}`,
      type: 'Warning',
      count: 1,
      firstTimestamp: stamp,
      lastTimestamp: stamp,
      source: { component: 'kube-apiserver' },
      reportingComponent: 'kube-apiserver',
      reportingInstance: 'kube-apiserver',
    });
  } catch {
    // The pod goes either way; an event is a note about it.
  }
}
