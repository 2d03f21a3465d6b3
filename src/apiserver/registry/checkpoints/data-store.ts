/**
 * The checkpoint data store (seed 002 "Checkpoint objects and data"): snapshots kept in memory,
 * outside the object store, bounded by a capacity in bytes (16 MiB by default). Storing a snapshot
 * that does not fit drops the oldest other snapshots first; one larger than the whole space is
 * refused (413).
 *
 * With a directory (the API server's `<data-dir>/checkpoint-data`), each snapshot is also written
 * there, whole and fsynced (temp file, fsync, rename, fsync of the directory), before {@link put}
 * resolves, so before the Checkpoint's status says it is stored and before a move's replacement is
 * written; {@link load} reads them back after a restart, within the same capacity (issue 26, "No lost
 * state"; the seed lets a restart lose the data). A dropped or deleted snapshot's file is removed.
 */
import { readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { AtomicFileWriter, writeFileAtomic } from '../../../lib/index.ts';
import { ApiError } from '../../errors.ts';

/** A snapshot's file: `<namespace>~<name>~<uid>.k32s` (no `~` in a namespace, a name or a uid). */
function fileName(key: string, uid: string): string {
  const [ns, name] = key.split('/') as [string, string];
  return `${ns}~${name}~${uid}.k32s`;
}

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
  /** Where the snapshots are also written, if anywhere. */
  readonly dir: string | undefined;
  private readonly entries = new Map<string, Entry>();
  private used = 0;
  private seq = 0;

  /**
   * @param capacity bytes for all snapshots together
   * @param dir a directory (it must exist) to keep the snapshots in across restarts; none: memory only
   * @throws RangeError when capacity is not a positive integer
   */
  constructor(capacity = DEFAULT_CHECKPOINT_DATA_BYTES, dir?: string) {
    if (!Number.isSafeInteger(capacity) || capacity <= 0) throw new RangeError(`checkpoint data capacity must be a positive number of bytes: current value is ${capacity}`);
    this.capacity = capacity;
    this.dir = dir;
  }

  /**
   * Reads back the snapshots kept in the directory (after a restart), oldest first, keeping those
   * `keep(key, uid)` accepts (their Checkpoint still exists with that uid) and that fit; the other
   * files, and temp files a crash left, are removed.
   * @returns how many snapshots were read back
   */
  load(keep: (key: string, uid: string) => boolean): number {
    if (!this.dir) return 0;
    const found: Array<{ file: string; key: string; uid: string; mtime: number }> = [];
    for (const file of readdirSync(this.dir)) {
      const m = /^([^~]+)~([^~]+)~([^~]+)\.k32s$/.exec(file);
      if (m && keep(`${m[1]}/${m[2]}`, m[3]!)) found.push({ file, key: `${m[1]}/${m[2]}`, uid: m[3]!, mtime: statSync(join(this.dir, file)).mtimeMs });
      else rmSync(join(this.dir, file), { force: true });
    }
    found.sort((a, b) => a.mtime - b.mtime);
    let n = 0;
    for (const f of found) {
      const bytes = readFileSync(join(this.dir, f.file));
      if (bytes.length > this.capacity) continue;
      for (const k of this.putInMemory(f.key, f.uid, bytes)) this.removeFile(k.key, k.uid);
      n++;
    }
    return n;
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
   * Begins writing a Checkpoint's snapshot file while its bytes arrive (issue 26: the disk write
   * overlaps the network; {@link put} then only fsyncs and renames). Give each piece to the writer's
   * `write(bytes, position)` as it comes, then the writer to {@link put}, or `abort()` it when the
   * bytes are refused. Nothing is visible in the directory before the put.
   * @returns undefined without a directory (memory only)
   */
  begin(key: string, uid: string): AtomicFileWriter | undefined {
    return this.dir ? new AtomicFileWriter(join(this.dir, fileName(key, uid)), 0o600) : undefined;
  }

  /**
   * Stores the snapshot of a Checkpoint (replacing its previous one), dropping the oldest other
   * snapshots until it fits; with a directory, resolves once the snapshot's file is written and fsynced.
   * @param written the file {@link begin} began for these bytes, already given every piece: it is
   *   committed (fsync, rename) instead of written again
   * @returns the keys of the snapshots dropped
   * @throws ApiError RequestEntityTooLarge (413); InternalError (500) when the file cannot be written
   *   (the snapshot is then not kept at all)
   */
  async put(key: string, uid: string, bytes: Buffer, written?: AtomicFileWriter): Promise<string[]> {
    try {
      this.checkSize(bytes.length);
    } catch (err: unknown) {
      await written?.abort();
      throw err;
    }
    if (this.dir) {
      try {
        if (written) await written.commit();
        else await writeFileAtomic(join(this.dir, fileName(key, uid)), bytes, 0o600);
      } catch (err: unknown) {
        throw new ApiError('InternalError', `the snapshot cannot be kept on disk: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
    const dropped = this.putInMemory(key, uid, bytes);
    for (const d of dropped) this.removeFile(d.key, d.uid);
    return dropped.map((d) => d.key);
  }

  private putInMemory(key: string, uid: string, bytes: Buffer): Array<{ key: string; uid: string }> {
    const prev = this.entries.get(key);
    if (prev) {
      this.entries.delete(key);
      this.used -= prev.bytes.length;
      if (prev.uid !== uid) this.removeFile(key, prev.uid);
    }
    const dropped: Array<{ key: string; uid: string }> = [];
    if (this.used + bytes.length > this.capacity) {
      const oldest = [...this.entries.entries()].sort((a, b) => a[1].seq - b[1].seq);
      for (const [k, e] of oldest) {
        if (this.used + bytes.length <= this.capacity) break;
        this.entries.delete(k);
        this.used -= e.bytes.length;
        dropped.push({ key: k, uid: e.uid });
      }
    }
    this.entries.set(key, { bytes, seq: ++this.seq, uid });
    this.used += bytes.length;
    return dropped;
  }

  private removeFile(key: string, uid: string): void {
    if (this.dir) void rm(join(this.dir, fileName(key, uid)), { force: true }).catch(() => {});
  }

  /** The snapshot of a Checkpoint, if held and taken for the Checkpoint of that uid. */
  get(key: string, uid?: string): Buffer | undefined {
    const e = this.entries.get(key);
    if (!e || (uid !== undefined && e.uid !== uid)) return undefined;
    return e.bytes;
  }

  /** Drops the snapshot of a Checkpoint (when it is deleted), and its file. */
  delete(key: string): void {
    const e = this.entries.get(key);
    if (!e) return;
    this.entries.delete(key);
    this.used -= e.bytes.length;
    this.removeFile(key, e.uid);
  }
}
