/**
 * The FeOS kubelet's part of a microVM pod's Move (issue 18, "Moving them"; docs/feos/cluster-pods.md
 * "Moving a microVM pod"). The checkpoint controller (src/controllers/checkpoint) drives the move through the
 * Checkpoint, as for a Wasm pod; what happens on the FeOS nodes is done here, over their node connections:
 *
 * - **Save** (a Save Checkpoint, periodic ones too): as the hibernation below, with `keep_running`: the pod is
 *   checkpointed into the object store and resumed on its node; the status is the same.
 * - **Hibernate** ({@link MicrovmMoves.onCheckpoint}): a Move Checkpoint `Saving` whose `status.nodeName` is a
 *   FeOS node and which has no `snapshotKind` yet: HibernatePod of the pod's FeOS pod (`no_abandon`: a move
 *   is a drain's), memory and disk into the object store the FeOS nodes share; then the Checkpoint's status
 *   gets `snapshotKind: microvm`, `snapshotName` (the FeOS checkpoint), `takenAt` (when the call left: the
 *   suspend is its first step, the freeze). A failure writes `snapshotKind: microvm` and `message` without
 *   `snapshotName`: the controller fails the move, and the pod, HIBERNATED on its node, is resumed there.
 * - **Restore** ({@link MicrovmMoves.restore}): a Pod bound to a FeOS node with `kube32.io/restore-from`
 *   (the replacement, or a rollback to the source) whose FeOS pod the node does not have, or has HIBERNATED:
 *   RestorePod of the FeOS pod's ID (`feos.kube32.io/pod-id`) from the Checkpoint's `snapshotName`, with its
 *   memory (the guest's processes and uptime go on). A Pod whose FeOS pod is HIBERNATED and that no move is
 *   taking (a move that failed before its replacement) is resumed the same way from its own checkpoint.
 *   A restore that fails ends the Pod `Failed` with reason `RestoreError`, which the controller rolls back.
 *
 * Calls are idempotent: a second HibernatePod joins the first (a HIBERNATED pod answers as it is), and a
 * checkpoint restores once (the store's claim).
 */
import type http2 from 'node:http2';
import type { V1Pod } from '@kubernetes/client-node';
import { ANNOTATIONS, type Checkpoint, CHECKPOINT_PLURAL, errorMessage, feosPodIdOf, Informer, isApiError, KUBE32_GROUP, KUBE32_VERSION, type RestClient } from '../../api/index.ts';
import type { Logger } from '../../lib/index.ts';
import { type PodInfo, PodService, PodState } from '../../feos/gen/feos/pod/v1/pod_pb.js';
import { GrpcCallError, unary } from '../node-client.ts';

/** gRPC FAILED_PRECONDITION. */
const FAILED_PRECONDITION = 9;
/** HibernatePod's deadline, ms: feosd's suspend budget (190 s + 5 s/GiB) and the upload. */
const HIBERNATE_TIMEOUT_MS = 600_000;
/** RestorePod's deadline, ms: the controller's deadline of a microVM move (5 min). */
const RESTORE_TIMEOUT_MS = 300_000;

/** What {@link startMicrovmMoves} needs of the kubelet. */
export interface MicrovmMovesOptions {
  rest: RestClient;
  log: Logger;
  /** The kubelet's Pods. */
  pods: { get(name: string, namespace?: string): V1Pod | undefined };
  /** Whether a node is a FeOS node. */
  isFeosNode(node: string): boolean;
  connection(node: string): http2.ClientHttp2Session | undefined;
}

/** The kubelet's part of microVM moves. */
export interface MicrovmMoves {
  /** The Checkpoints (for {@link MicrovmMoves.moveInFlight}). */
  readonly checkpoints: Informer<Checkpoint>;
  /** Whether a Move of the pod is Saving or Moving now (its HIBERNATED FeOS pod is not resumed meanwhile). */
  moveInFlight(pod: V1Pod): boolean;
  /** Whether the pod's FeOS pod must be restored rather than created: it names a Checkpoint, or its FeOS pod is HIBERNATED and no move takes it. */
  wantsRestore(pod: V1Pod, info: PodInfo | undefined): boolean;
  /**
   * Restores the pod's FeOS pod on `session`'s node (see the file's comment).
   * @returns the restored pod, or `{ failed }` with why (the caller ends the Pod `Failed`, `RestoreError`);
   *   `stale`: the node's HIBERNATED record names a checkpoint another node restored already (the pod's
   *   memory lives there), so it can only start afresh
   *   On success, `from` says where its memory came from, for the `Restored` event (`Checkpoint NAME, taken
   *   on node NODE`, or `its hibernation on this node`).
   */
  restore(pod: V1Pod, info: PodInfo | undefined, session: http2.ClientHttp2Session): Promise<{ pod: PodInfo | undefined; from: string } | { failed: string; stale: boolean }>;
  start(): Promise<void>;
  stop(): Promise<void>;
}

function ckPath(ns: string, name: string, sub = ''): string {
  return `/apis/${KUBE32_GROUP}/${KUBE32_VERSION}/namespaces/${encodeURIComponent(ns)}/${CHECKPOINT_PLURAL}/${encodeURIComponent(name)}${sub}`;
}

function why(err: unknown): string {
  return err instanceof GrpcCallError ? err.details || errorMessage(err) : errorMessage(err);
}

/** Builds the kubelet's part of microVM moves; its Checkpoints' informer starts with {@link MicrovmMoves.start}. */
export function startMicrovmMoves(o: MicrovmMovesOptions): MicrovmMoves {
  const { rest, log } = o;
  const checkpoints = new Informer<Checkpoint>({ rest, path: `/apis/${KUBE32_GROUP}/${KUBE32_VERSION}/${CHECKPOINT_PLURAL}`, resource: 'checkpoints', log });
  /** Checkpoints (by uid) whose hibernation runs in this process. */
  const hibernating = new Set<string>();
  let stopped = false;

  const writeStatus = async (ck: Checkpoint, status: Record<string, unknown>): Promise<void> => {
    await rest.json({
      method: 'PATCH',
      path: ckPath(ck.metadata?.namespace ?? 'default', ck.metadata?.name ?? '', '/status'),
      body: { status },
      contentType: 'application/merge-patch+json',
    });
  };

  const hibernate = async (ck: Checkpoint): Promise<void> => {
    const ns = ck.metadata?.namespace ?? 'default';
    const node = ck.status?.nodeName ?? '';
    const pod = o.pods.get(ck.spec.podName, ns);
    const takenAt = new Date().toISOString();
    let status: Record<string, unknown>;
    const session = o.connection(node);
    if (!pod || pod.spec?.nodeName !== node) {
      status = { snapshotKind: 'microvm', message: `pod ${ns}/${ck.spec.podName} is not on FeOS node ${node}` };
    } else if (!session) {
      status = { snapshotKind: 'microvm', message: `FeOS node ${node} has no node connection: it cannot hibernate the pod` };
    } else {
      const id = feosPodIdOf(pod) ?? '';
      // A Save (periodic ones too) checkpoints the pod and leaves it running; a Move releases it.
      const keepRunning = ck.spec?.action !== 'Move';
      log.info({ checkpoint: `${ns}/${ck.metadata?.name}`, node, feosPod: id, keepRunning }, keepRunning ? 'checkpointing the microVM (it keeps running)' : 'hibernating the microVM for a move');
      try {
        const r = await unary(session, PodService.method.hibernatePod, { id, noAbandon: true, keepRunning }, { timeoutMs: HIBERNATE_TIMEOUT_MS });
        const name = r.pod?.checkpoint ?? '';
        status = name
          ? { snapshotKind: 'microvm', snapshotName: name, takenAt, nodeName: node }
          : { snapshotKind: 'microvm', message: `HibernatePod of ${id} on ${node} answered without a checkpoint` };
        log.info({ checkpoint: `${ns}/${ck.metadata?.name}`, node, feosPod: id, feosCheckpoint: name, ms: Date.now() - Date.parse(takenAt) }, 'microVM hibernated');
      } catch (err: unknown) {
        status = { snapshotKind: 'microvm', message: `HibernatePod of ${id} on ${node}: ${why(err)}` };
      }
    }
    await writeStatus(ck, status);
  };

  const onCheckpoint = (ck: Checkpoint): void => {
    if (stopped) return;
    const st = ck.status ?? {};
    if (st.phase !== 'Saving' || st.snapshotKind || !st.nodeName || !o.isFeosNode(st.nodeName)) return;
    const uid = ck.metadata?.uid ?? '';
    if (hibernating.has(uid)) return;
    hibernating.add(uid);
    hibernate(ck)
      .catch((err: unknown) => {
        if (!isApiError(err, 404)) log.warn({ checkpoint: `${ck.metadata?.namespace}/${ck.metadata?.name}`, err: errorMessage(err) }, 'hibernation status not written; trying again');
      })
      .finally(() => hibernating.delete(uid));
  };
  checkpoints.on((verb, ck) => {
    if (verb !== 'delete') onCheckpoint(ck);
  });
  const resync = setInterval(() => {
    if (checkpoints.synced) for (const ck of checkpoints.list()) onCheckpoint(ck);
  }, 5000);
  resync.unref();

  const moveInFlight = (pod: V1Pod): boolean =>
    checkpoints
      .list(pod.metadata?.namespace)
      .some((c) => c.spec?.podName === pod.metadata?.name && c.spec?.action === 'Move' && (c.status?.phase === 'Saving' || c.status?.phase === 'Moving'));

  return {
    checkpoints,
    moveInFlight,
    wantsRestore(pod, info) {
      if (!checkpoints.synced) return false;
      const named = pod.metadata?.annotations?.[ANNOTATIONS.restoreFrom] !== undefined;
      if (!info) return named;
      return info.state === PodState.HIBERNATED && (named || !moveInFlight(pod));
    },
    async restore(pod, info, session) {
      const ns = pod.metadata?.namespace ?? 'default';
      const id = feosPodIdOf(pod) ?? '';
      const from = pod.metadata?.annotations?.[ANNOTATIONS.restoreFrom];
      let checkpoint = info?.state === PodState.HIBERNATED ? info.checkpoint : '';
      let where = 'its hibernation on this node';
      if (from) {
        let ck: Checkpoint;
        try {
          ck = await rest.json<Checkpoint>({ method: 'GET', path: ckPath(ns, from) });
        } catch (err: unknown) {
          if (isApiError(err, 404)) return { failed: `checkpoint ${from} not found`, stale: false };
          throw err;
        }
        if (ck.status?.snapshotKind !== 'microvm' || !ck.status.snapshotName) {
          return { failed: `checkpoint ${from} holds no microVM snapshot (snapshotKind ${ck.status?.snapshotKind ?? 'none'})`, stale: false };
        }
        checkpoint = ck.status.snapshotName;
        where = `Checkpoint ${from}${ck.status.nodeName ? `, taken on node ${ck.status.nodeName}` : ''}`;
      }
      log.info({ pod: `${ns}/${pod.metadata?.name}`, node: pod.spec?.nodeName, feosPod: id, feosCheckpoint: checkpoint, from }, 'restoring the microVM');
      try {
        const r = await unary(session, PodService.method.restorePod, { id, checkpoint }, { timeoutMs: RESTORE_TIMEOUT_MS });
        log.info({ pod: `${ns}/${pod.metadata?.name}`, feosPod: id, state: r.pod ? PodState[r.pod.state] : undefined }, 'microVM restored');
        return { pod: r.pod, from: where };
      } catch (err: unknown) {
        const stale = err instanceof GrpcCallError && err.code === FAILED_PRECONDITION && /restored already/.test(err.details) && info?.state === PodState.HIBERNATED;
        return { failed: `RestorePod of ${id}${checkpoint ? ` from ${checkpoint}` : ''} on ${pod.spec?.nodeName}: ${why(err)}`, stale };
      }
    },
    async start() {
      await checkpoints.start();
    },
    async stop() {
      stopped = true;
      clearInterval(resync);
      await checkpoints.stop();
    },
  };
}
