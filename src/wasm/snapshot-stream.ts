/**
 * The main thread's end of a snapshot stream (seed, "Snapshot format"): the pod's context sends its
 * first {@link SNAPSHOT_WINDOW} chunks of at most {@link SNAPSHOT_CHUNK_BYTES} right after the
 * snapshot's length (no round trip to ask for them), and each chunk consumed grants one more, so at
 * most 4 MiB are in flight whatever the memory size. Chunks that arrive before the consumer reads
 * them wait in the stream's {@link ChunkInbox}.
 */
import { PodStateError } from './errors.ts';
import type { FromWorker, ToWorker } from './protocol.ts';

/** Bytes of linear memory in one snapshot chunk. */
export const SNAPSHOT_CHUNK_BYTES = 1 << 20;
/** Snapshot chunks the context sends ahead of the consumer (the first of them with the snapshot's length). */
export const SNAPSHOT_WINDOW = 4;

export type ChunkMessage = Extract<FromWorker, { op: 'snapshotChunk' }>;

/**
 * The chunk messages of one stream, in order, from when the snapshot is asked for: at most
 * {@link SNAPSHOT_WINDOW} chunks wait here (the context sends no more until the consumer takes one).
 */
export class ChunkInbox {
  readonly #queue: ChunkMessage[] = [];
  #wake: (() => void) | undefined;

  /** A message of the stream arrives (or an error for it: the pod ended, it was thawed). */
  push(m: ChunkMessage): void {
    this.#queue.push(m);
    this.#wake?.();
  }

  /** The next message, when it has come. */
  async next(): Promise<ChunkMessage> {
    while (this.#queue.length === 0) await new Promise<void>((r) => { this.#wake = r; });
    this.#wake = undefined;
    return this.#queue.shift()!;
  }
}

/** What a stream needs of its pod. */
export interface SnapshotStreamHost {
  /** Sends to the pod's context. */
  post(m: ToWorker): void;
  /** The pod's exit reason once it has ended. */
  ended(): string | undefined;
  /** Ends the stream's bookkeeping; true when it was still active (the context is then told to drop it). */
  release(id: number): boolean;
}

/**
 * The chunks of stream `id` as they come into `inbox`, each a fresh buffer the consumer owns.
 * @throws PodStateError `NotRunning` when the pod ends meanwhile, `NotFrozen` when it is thawed
 *   meanwhile (or the context fails to write its state)
 */
export async function* snapshotChunks(id: number, inbox: ChunkInbox, host: SnapshotStreamHost): AsyncGenerator<Uint8Array, void, undefined> {
  const grant = (credit: number): void => {
    if (host.ended() === undefined) host.post({ op: 'snapshotNext', id, credit });
  };
  try {
    const ended = host.ended();
    if (ended !== undefined) throw new PodStateError('NotRunning', `the pod has ended (${ended})`);
    for (;;) {
      const m = await inbox.next();
      if (m.error) throw new PodStateError(host.ended() !== undefined ? 'NotRunning' : 'NotFrozen', `snapshot stream: ${m.error}`);
      if (m.end) break;
      yield m.chunk!;
      grant(1);
    }
  } finally {
    if (host.release(id) && host.ended() === undefined) host.post({ op: 'snapshotCancel', id });
  }
}
