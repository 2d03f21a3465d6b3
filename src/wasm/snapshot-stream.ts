/**
 * The main thread's end of a snapshot stream (seed, "Snapshot format"): the pod's context sends up
 * to {@link SNAPSHOT_WINDOW} chunks of at most {@link SNAPSHOT_CHUNK_BYTES} ahead of the consumer,
 * and each chunk consumed grants one more, so at most 4 MiB are in flight whatever the memory size.
 */
import { PodStateError } from './errors.ts';
import type { FromWorker, ToWorker } from './protocol.ts';

/** Bytes of linear memory in one snapshot chunk. */
export const SNAPSHOT_CHUNK_BYTES = 1 << 20;
/** Snapshot chunks the context sends ahead of the consumer. */
export const SNAPSHOT_WINDOW = 4;

export type ChunkMessage = Extract<FromWorker, { op: 'snapshotChunk' }>;

/** What a stream needs of its pod. */
export interface SnapshotStreamHost {
  /** Sends to the pod's context. */
  post(m: ToWorker): void;
  /** Routes the stream's messages (by id) to `handler` until {@link release}. */
  listen(id: number, handler: (m: ChunkMessage) => void): void;
  /** The pod's exit reason once it has ended. */
  ended(): string | undefined;
  /** True while the pod is still frozen. */
  frozen(): boolean;
  /** The trailer's SHA-256 (hex) of a stream read to its end while still frozen. */
  onDigest(hex: string): void;
  /** Ends the stream's bookkeeping; true when it was still active (the context is then told to drop it). */
  release(id: number): boolean;
}

/**
 * The chunks of stream `id`, each a fresh buffer the consumer owns.
 * @throws PodStateError `NotRunning` when the pod ends meanwhile, `NotFrozen` when it is thawed
 *   meanwhile (or the context fails to write its state)
 */
export async function* snapshotChunks(id: number, host: SnapshotStreamHost): AsyncGenerator<Uint8Array, void, undefined> {
  const inbox: ChunkMessage[] = [];
  let wake: (() => void) | undefined;
  host.listen(id, (m) => {
    inbox.push(m);
    wake?.();
  });
  const grant = (credit: number): void => {
    if (host.ended() === undefined) host.post({ op: 'snapshotNext', id, credit });
  };
  let last: Uint8Array | undefined;
  try {
    const ended = host.ended();
    if (ended !== undefined) throw new PodStateError('NotRunning', `the pod has ended (${ended})`);
    grant(SNAPSHOT_WINDOW);
    for (;;) {
      while (inbox.length === 0) await new Promise<void>((r) => { wake = r; });
      const m = inbox.shift()!;
      if (m.error) throw new PodStateError(host.ended() !== undefined ? 'NotRunning' : 'NotFrozen', `snapshot stream: ${m.error}`);
      if (m.end) break;
      last = m.chunk!;
      yield m.chunk!;
      grant(1);
    }
    if (last && last.length >= 32 && host.frozen()) host.onDigest(Buffer.from(last.subarray(last.length - 32)).toString('hex'));
  } finally {
    if (host.release(id) && host.ended() === undefined) host.post({ op: 'snapshotCancel', id });
  }
}
