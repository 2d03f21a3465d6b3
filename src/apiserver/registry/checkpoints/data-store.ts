/**
 * The checkpoint data store (seed 002 "Checkpoint objects and data"): snapshots kept in memory,
 * outside the object store, bounded by a capacity in bytes (16 MiB by default). Storing a snapshot
 * that does not fit drops the oldest other snapshots first; one larger than the whole space is
 * refused (413). Nothing survives a restart.
 */
import { ApiError } from '../../errors.ts';

/** Default capacity: 16 MiB, the simulator's figure in the seed. */
export const DEFAULT_CHECKPOINT_DATA_BYTES = 16 * 1024 * 1024;

interface Entry {
  bytes: Buffer;
  seq: number;
  uid: string;
}

/** Snapshots by `<namespace>/<name>` of their Checkpoint. */
export class CheckpointDataStore {
  readonly capacity: number;
  private readonly entries = new Map<string, Entry>();
  private used = 0;
  private seq = 0;

  /**
   * @param capacity bytes for all snapshots together
   * @throws RangeError when capacity is not a positive integer
   */
  constructor(capacity = DEFAULT_CHECKPOINT_DATA_BYTES) {
    if (!Number.isSafeInteger(capacity) || capacity <= 0) throw new RangeError(`checkpoint data capacity must be a positive number of bytes: current value is ${capacity}`);
    this.capacity = capacity;
  }

  /** Bytes held now. */
  get usedBytes(): number {
    return this.used;
  }

  /**
   * Checks that `size` bytes can ever be stored.
   * @throws ApiError RequestEntityTooLarge (413) when larger than the whole space
   */
  checkSize(size: number): void {
    if (size > this.capacity) {
      throw new ApiError('RequestEntityTooLarge', `the snapshot is ${size} bytes, larger than the whole checkpoint data space of ${this.capacity} bytes`);
    }
  }

  /**
   * Stores the snapshot of a Checkpoint (replacing its previous one), dropping the oldest other
   * snapshots until it fits.
   * @returns the keys of the snapshots dropped
   * @throws ApiError RequestEntityTooLarge (413)
   */
  put(key: string, uid: string, bytes: Buffer): string[] {
    this.checkSize(bytes.length);
    this.delete(key);
    const dropped: string[] = [];
    if (this.used + bytes.length > this.capacity) {
      const oldest = [...this.entries.entries()].sort((a, b) => a[1].seq - b[1].seq);
      for (const [k] of oldest) {
        if (this.used + bytes.length <= this.capacity) break;
        this.delete(k);
        dropped.push(k);
      }
    }
    this.entries.set(key, { bytes, seq: ++this.seq, uid });
    this.used += bytes.length;
    return dropped;
  }

  /** The snapshot of a Checkpoint, if held and taken for the Checkpoint of that uid. */
  get(key: string, uid?: string): Buffer | undefined {
    const e = this.entries.get(key);
    if (!e || (uid !== undefined && e.uid !== uid)) return undefined;
    return e.bytes;
  }

  /** Drops the snapshot of a Checkpoint (when it is deleted). */
  delete(key: string): void {
    const e = this.entries.get(key);
    if (!e) return;
    this.entries.delete(key);
    this.used -= e.bytes.length;
  }
}
