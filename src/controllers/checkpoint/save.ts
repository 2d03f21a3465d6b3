/**
 * The snapshot step of a Save or a Move (seed "Moves", step 2): ask the pod's kubelet, through the node
 * proxy, for a snapshot (`leave=running` for a Save, `leave=frozen` for a Move) and stream it into the
 * Checkpoint's data. One snapshot at a time in the whole control plane (seed "Limits").
 *
 * Prerequisites: the Checkpoint is `Saving` with `status.nodeName` the pod's node.
 * Effects on success: the data is stored; the answer carries the snapshot's facts and the freeze time.
 * On failure: a {@link SnapshotFailure} saying why, with the node's blockers when it refused; a Move's pod
 * may be left frozen, which the caller thaws.
 */
import { Readable } from 'node:stream';
import type { V1Pod } from '@kubernetes/client-node';
import type { ControllerContext } from '../runtime/context.ts';
import { errorMessage } from '../runtime/errors.ts';
import type { Checkpoint, CheckpointStatus } from '../runtime/types.ts';

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
 */
export async function snapshotAndStore(
  ctx: ControllerContext,
  ck: Checkpoint,
  pod: V1Pod,
  container: string,
  node: string,
  leave: 'running' | 'frozen',
): Promise<StoredSnapshot | SnapshotFailure> {
  const ns = pod.metadata?.namespace ?? 'default';
  const podName = pod.metadata?.name ?? '';
  return ctx.state.snapshotLock.run(async () => {
    const frozenAt = ctx.clock.now();
    let answer: Awaited<ReturnType<typeof ctx.api.takeSnapshot>>;
    try {
      answer = await ctx.api.takeSnapshot(node, ns, podName, container, leave, ctx.timings.freezeTimeoutMs);
    } catch (err: unknown) {
      return { ok: false, message: `snapshot on node ${node}: ${errorMessage(err)}`, mayBeFrozen: true };
    }
    if (answer.kind === 'refused') {
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
      const s = stored?.status ?? {};
      const facts: CheckpointStatus = {
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
  });
}
