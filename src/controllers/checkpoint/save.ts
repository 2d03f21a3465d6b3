/**
 * The snapshot step of a Save or a Move (seed "Moves", step 2): ask the pod's kubelet for a snapshot
 * (`leave=running` for a Save, `leave=frozen` for a Move) stored as the Checkpoint's data. The API server
 * takes it from the node straight into the data (`POST .../checkpoints/<name>/data?node=...`), so the bytes
 * cross one hop; an API server without that call (405) gets the bytes relayed through this process (the node
 * proxy's answer streamed into a PUT of the data). One snapshot at a time in the whole control plane (seed
 * "Limits").
 *
 * Prerequisites: the Checkpoint is `Saving` with `status.nodeName` the pod's node.
 * Effects on success: the data is stored; the answer carries the snapshot's facts and the freeze time.
 * On failure: a {@link SnapshotFailure} saying why, with the node's blockers when it refused; a Move's pod
 * may be left frozen, which the caller thaws.
 */
import { Readable } from 'node:stream';
import type { V1Pod } from '@kubernetes/client-node';
import type { ControllerContext } from '../runtime/context.ts';
import type { SnapshotAnswer } from '../runtime/api.ts';
import { type Checkpoint, type CheckpointStatus, errorMessage, hasCode } from '../../api/index.ts';
import { logStep, passStep } from './timeline.ts';

/** Snapshots above this are refused before buffering when the kubelet sends no Content-Length. */
const MAX_UNSIZED_SNAPSHOT_BYTES = 256 * 1024 * 1024;

/** A snapshot stored as the Checkpoint's data. */
export interface StoredSnapshot {
  ok: true;
  /** Observer time of the request that froze the pod, ms. */
  frozenAt: number;
  /** Facts of the stored snapshot, for the status. */
  facts: CheckpointStatus;
  /** The Checkpoint's `resourceVersion` after the data PUT (the API server wrote the facts), when answered. */
  resourceVersion?: string;
}

/** A snapshot that could not be taken or stored. */
export interface SnapshotFailure {
  ok: false;
  message: string;
  blockers?: string[];
  /** Whether the pod may be frozen now (the snapshot was taken, the store failed). */
  mayBeFrozen: boolean;
}

/**
 * Takes the snapshot of `container` of `pod` on `node` and stores it as `ck`'s data.
 * @param leave `frozen` for a move
 * @param target a move's target node, to which the API server sends the bytes on while it stores them
 *   (only with the controllers' `pushSnapshotsToTarget`)
 */
export async function snapshotAndStore(
  ctx: ControllerContext,
  ck: Checkpoint,
  pod: V1Pod,
  container: string,
  node: string,
  leave: 'running' | 'frozen',
  target?: string,
): Promise<StoredSnapshot | SnapshotFailure> {
  const ns = pod.metadata?.namespace ?? 'default';
  const podName = pod.metadata?.name ?? '';
  return ctx.state.snapshotLock.run(async () => {
    const frozenAt = ctx.clock.now();
    logStep(ctx, ck, 'freeze-requested');
    let captured: Awaited<ReturnType<typeof ctx.api.captureCheckpointData>> | undefined;
    try {
      captured = await ctx.api.captureCheckpointData(ns, ck.metadata?.name ?? '', node, container, leave, ctx.timings.freezeTimeoutMs, target);
    } catch (err: unknown) {
      // 405: an API server that cannot take the snapshot itself; the bytes then come through here.
      if (!hasCode(err, 405)) return { ok: false, message: `snapshot of node ${node} into the Checkpoint's data: ${errorMessage(err)}`, mayBeFrozen: true };
      ctx.log.debug({ checkpoint: `${ns}/${ck.metadata?.name}` }, 'the API server cannot take snapshots from nodes: relaying the bytes');
    }
    if (captured?.kind === 'refused') return refusal(captured, node, ns, podName, container);
    if (captured) {
      await passStep(ctx, ck, 'data-stored');
      const s = captured.checkpoint.status ?? {};
      const facts: CheckpointStatus = {
        snapshotKind: 'wasm',
        takenAt: new Date(frozenAt).toISOString(),
        nodeName: node,
        sizeBytes: s.sizeBytes,
        snapshotSha256: s.snapshotSha256,
        imageSha256: s.imageSha256,
        podTimeMs: s.podTimeMs,
      };
      return { ok: true, frozenAt, facts, resourceVersion: captured.checkpoint.metadata?.resourceVersion };
    }
    return relay(ctx, ck, pod, container, node, leave, frozenAt);
  });
}

/** A node's refusal of a snapshot (its 404, 409 `NotMovable`, 504 `Timeout`, ...) as a failure. */
function refusal(answer: Extract<SnapshotAnswer, { kind: 'refused' }>, node: string, ns: string, podName: string, container: string): SnapshotFailure {
  const blockers = answer.blockers;
  let message: string;
  if (answer.code === 409 || answer.code === 504) {
    message = blockers.length > 0 ? `the pod cannot move: ${blockers.join('; ')}` : answer.message;
  } else if (answer.code === 404) {
    message = `node ${node} has no pod ${ns}/${podName} container ${container}: ${answer.message}`;
  } else {
    message = `snapshot on node ${node}: ${answer.message}`;
  }
  return { ok: false, message, blockers: blockers.length > 0 ? blockers : undefined, mayBeFrozen: answer.code >= 500 && answer.code !== 504 };
}

/**
 * The snapshot through this process, for an API server that cannot take it from the node: the node proxy's
 * answer streamed into a PUT of the data.
 */
async function relay(
  ctx: ControllerContext,
  ck: Checkpoint,
  pod: V1Pod,
  container: string,
  node: string,
  leave: 'running' | 'frozen',
  frozenAt: number,
): Promise<StoredSnapshot | SnapshotFailure> {
  const ns = pod.metadata?.namespace ?? 'default';
  const podName = pod.metadata?.name ?? '';
  let answer: SnapshotAnswer;
  try {
    answer = await ctx.api.takeSnapshot(node, ns, podName, container, leave, ctx.timings.freezeTimeoutMs);
  } catch (err: unknown) {
    return { ok: false, message: `snapshot on node ${node}: ${errorMessage(err)}`, mayBeFrozen: true };
  }
  if (answer.kind === 'refused') return refusal(answer, node, ns, podName, container);
  logStep(ctx, ck, 'snapshot-answered');
  let body: Readable = answer.body;
  let size = answer.sizeBytes;
  try {
    if (!Number.isFinite(size)) {
      // No Content-Length: buffer (bounded) so that the PUT can send one.
      const chunks: Buffer[] = [];
      let total = 0;
      for await (const c of body) {
        total += (c as Buffer).length;
        if (total > MAX_UNSIZED_SNAPSHOT_BYTES) throw new Error(`snapshot larger than ${MAX_UNSIZED_SNAPSHOT_BYTES} bytes`);
        chunks.push(c as Buffer);
      }
      const all = Buffer.concat(chunks);
      size = all.length;
      body = Readable.from([all]);
    }
    const stored = await ctx.api.putCheckpointData(ns, ck.metadata?.name ?? '', body, size);
    await passStep(ctx, ck, 'data-stored');
    const s = stored?.status ?? {};
    const facts: CheckpointStatus = {
      snapshotKind: 'wasm',
      takenAt: new Date(frozenAt).toISOString(),
      nodeName: node,
      sizeBytes: s.sizeBytes ?? size,
      snapshotSha256: s.snapshotSha256 ?? answer.snapshotSha256,
      imageSha256: s.imageSha256 ?? answer.imageSha256,
      podTimeMs: s.podTimeMs ?? answer.podTimeMs,
    };
    ctx.log.debug({ checkpoint: `${ns}/${ck.metadata?.name}`, sizeBytes: size, ms: ctx.clock.now() - frozenAt }, 'snapshot stored');
    return { ok: true, frozenAt, facts, resourceVersion: stored?.metadata?.resourceVersion };
  } catch (err: unknown) {
    body.destroy();
    return { ok: false, message: `storing the snapshot: ${errorMessage(err)}`, mayBeFrozen: true };
  }
}
