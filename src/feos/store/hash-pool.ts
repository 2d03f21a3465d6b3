/**
 * A small pool of worker threads that hash, so that a pod's checkpoint is cut and checked beside its transfer
 * rather than between its requests (docs/feos/object-store.md, "What it costs"): a restore's ranges are checked
 * chunk by chunk (`digests`) while the next ranges download, and a hibernation's files are cut into
 * content-defined chunks and hashed (`chunker`) while the packs before upload. JavaScript's gear loop and
 * SHA-256 of 180 MiB take seconds of one core here; on the main thread they held up the HTTP requests' own work.
 *
 * Our own code, not piscina's or tinypool's: one task shape, buffers handed over both ways, and a file's cutting
 * pinned to one worker in order (a session), which a general pool would need this much code around anyway; and no
 * new dependency for feosd's install. Workers start at the first call, do not keep the process alive while idle,
 * and a worker that dies fails its calls (the next call starts another).
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { CdcParams } from './cdc.ts';

/** How many workers the shared pool runs: two, or one on a one-core machine. */
export const HASH_WORKERS = Math.max(1, Math.min(2, availableParallelism()));

const WORKER_URL = new URL(import.meta.url.endsWith('.ts') ? './hash-worker.ts' : './hash-worker.js', import.meta.url);

interface Reply {
  id: number;
  buf?: ArrayBuffer;
  ends?: Int32Array;
  digests?: ArrayBuffer;
  lastBytes?: number;
  sha256?: string;
  sizeBytes?: number;
  error?: string;
}

interface Slot {
  worker: Worker;
  pending: Map<number, { resolve: (r: Reply) => void; reject: (err: Error) => void }>;
}

/**
 * Chunks a worker cut, in order, and their SHA-256s (lowercase hex). The chunks are views of `piece` (the piece
 * pushed, back from the worker: valid until the caller reuses it), but the first, which began before the piece, is
 * a copy of its own when it did.
 */
export interface CutChunks {
  chunks: Buffer[];
  sha256s: string[];
  /** The piece pushed, as it went (absent for `end`'s answer): the caller may reuse it once done with the chunks. */
  piece?: Buffer;
}

/** A file's cutting on one worker: `push` its pieces in order, then `end`. Calls may be many at once; they answer in order. */
export interface ChunkSession {
  /**
   * Cuts the next piece (copied: the caller may reuse it).
   * @param handOver the piece is a buffer of its own that the caller is done with (as `PieceBuffers` gives): it goes
   *   to the worker without a copy, detached until it comes back as `piece` (a view of a larger buffer is copied all the same)
   */
  push(data: Uint8Array, handOver?: boolean): Promise<CutChunks>;
  /** The chunks left, and the whole stream's size (bytes) and SHA-256. */
  end(): Promise<CutChunks & { sizeBytes: number; sha256: string }>;
}

/** The bytes as a whole ArrayBuffer to transfer: the view's own buffer when it covers it, else a copy. */
function handOver(u: Uint8Array): ArrayBuffer {
  if (u.byteOffset === 0 && u.byteLength === u.buffer.byteLength && u.buffer instanceof ArrayBuffer) return u.buffer;
  return new Uint8Array(u).buffer;
}

const hex = (raw: Buffer, i: number) => raw.toString('hex', 32 * i, 32 * i + 32);

/** Worker threads that hash (see the module's comment). */
export class HashPool {
  readonly size: number;
  readonly #slots: Array<Slot | undefined> = [];
  #ids = 0;

  constructor(size = HASH_WORKERS) {
    this.size = size;
  }

  #slot(i: number): Slot {
    const had = this.#slots[i];
    if (had) return had;
    const worker = new Worker(WORKER_URL);
    worker.unref();
    const slot: Slot = { worker, pending: new Map() };
    const fail = (err: Error) => {
      if (this.#slots[i] === slot) this.#slots[i] = undefined;
      for (const p of slot.pending.values()) p.reject(err);
      slot.pending.clear();
    };
    worker.on('message', (r: Reply) => {
      const p = slot.pending.get(r.id);
      if (!p) return;
      slot.pending.delete(r.id);
      if (slot.pending.size === 0) worker.unref();
      if (r.error !== undefined) p.reject(new Error(r.error));
      else p.resolve(r);
    });
    worker.on('error', (err: unknown) => fail(err instanceof Error ? err : new Error(String(err))));
    worker.on('exit', (code) => fail(new Error(`hash worker exited (code ${code})`)));
    this.#slots[i] = slot;
    return slot;
  }

  /** The index of the worker with the fewest calls in flight. */
  #leastBusy(): number {
    let best = 0;
    for (let i = 1; i < this.size; i++) if ((this.#slots[i]?.pending.size ?? 0) < (this.#slots[best]?.pending.size ?? 0)) best = i;
    return best;
  }

  #call(i: number, msg: Record<string, unknown>, transfer: ArrayBuffer[], answered = true): Promise<Reply> {
    const slot = this.#slot(i);
    const id = ++this.#ids;
    if (!answered) {
      slot.worker.postMessage({ id, ...msg }, transfer);
      return Promise.resolve({ id });
    }
    return new Promise<Reply>((resolve, reject) => {
      if (slot.pending.size === 0) slot.worker.ref();
      slot.pending.set(id, { resolve, reject });
      slot.worker.postMessage({ id, ...msg }, transfer);
    });
  }

  /**
   * The SHA-256s (lowercase hex) of spans of `bytes`, each `[offset, length]` (bytes) within it.
   * @param bytes handed over when it is a whole buffer of its own (the caller uses the returned `bytes` instead)
   * @returns the bytes (the same content) and the SHA-256s in the spans' order
   * @throws Error when the worker fails
   */
  async digests(bytes: Uint8Array, spans: Array<[number, number]>): Promise<{ bytes: Buffer; sha256s: string[] }> {
    const flat = new Float64Array(2 * spans.length);
    for (const [i, [offset, length]] of spans.entries()) {
      if (offset < 0 || length < 0 || offset + length > bytes.byteLength) throw new RangeError(`hash pool: span [${offset}, ${length}] is outside the ${bytes.byteLength} bytes`);
      flat[2 * i] = offset;
      flat[2 * i + 1] = length;
    }
    const buf = handOver(bytes);
    const r = await this.#call(this.#leastBusy(), { op: 'digest', buf, spans: flat }, [buf]);
    const raw = Buffer.from(r.digests!);
    return { bytes: Buffer.from(r.buf!), sha256s: spans.map((_, i) => raw.toString('hex', 32 * i, 32 * i + 32)) };
  }

  /**
   * A file's content-defined cutting (cdc.ts's ChunkCutter with `params`) and hashing on one worker.
   * @throws (from its calls) RangeError's message for sizes that are not a valid set; Error when the worker fails
   */
  chunker(params: CdcParams): ChunkSession {
    const i = this.#leastBusy();
    const session = ++this.#ids;
    void this.#call(i, { op: 'open', session, params }, [], false);
    // The stream's bytes since its last cut, as the worker's cutter holds them (answers come in order): the first
    // chunk of the next answer begins with them.
    let carry = Buffer.alloc(0);
    let order = Promise.resolve();
    const take = (r: Reply): CutChunks => {
      const piece = Buffer.from(r.buf!);
      const ends = r.ends!;
      const raw = Buffer.from(r.digests!);
      const chunks: Buffer[] = [];
      const sha256s: string[] = [];
      let from = 0;
      for (const [k, end] of ends.entries()) {
        chunks.push(k === 0 && carry.length > 0 ? Buffer.concat([carry, piece.subarray(0, end)]) : piece.subarray(from, end));
        sha256s.push(hex(raw, k));
        from = end;
      }
      carry = ends.length === 0 ? Buffer.concat([carry, piece]) : Buffer.from(piece.subarray(from));
      return { chunks, sha256s, piece };
    };
    return {
      push: (data, taken = false) => {
        const buf = taken ? handOver(data) : new Uint8Array(data).buffer;
        const answered = this.#call(i, { op: 'push', session, buf }, [buf]);
        // Each answer is taken in the order of the pushes, whatever order the caller awaits them in.
        const cut = order.then(() => answered).then(take);
        order = cut.then(
          () => {},
          () => {},
        );
        return cut;
      },
      end: async () => {
        const answered = this.#call(i, { op: 'end', session }, []);
        await order;
        const r = await answered;
        const last = carry;
        carry = Buffer.alloc(0);
        if (r.lastBytes !== last.length) throw new Error(`hash pool: the worker ended with ${r.lastBytes} bytes after its last cut, this side with ${last.length}`);
        return { chunks: last.length > 0 ? [last] : [], sha256s: last.length > 0 ? [hex(Buffer.from(r.digests!), 0)] : [], sizeBytes: r.sizeBytes!, sha256: r.sha256! };
      },
    };
  }

  /** Stops the workers (calls in flight fail). */
  async close(): Promise<void> {
    const slots = this.#slots.splice(0);
    await Promise.all(slots.map((s) => s?.worker.terminate()));
  }
}

let shared: HashPool | undefined;

/** The process's pool, made at its first use. */
export function hashPool(): HashPool {
  shared ??= new HashPool();
  return shared;
}
