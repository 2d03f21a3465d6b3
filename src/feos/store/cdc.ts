/**
 * Content-defined chunking (FastCDC, Xia et al., USENIX ATC 2016, with normalized chunking at level 2): cuts a
 * byte stream where a rolling gear hash of the bytes since the last cut matches a mask, so that a cut depends
 * only on the bytes around it. Bytes inserted into or removed from the middle of a stream move the cuts near
 * them alone: the chunks before and after stay byte for byte the same, and a store keyed by the chunks'
 * SHA-256 keeps them once. That is what lets a second hibernation of a pod upload only what changed
 * (seed 000, "Hibernate and Restore"; docs/feos/object-store.md): QEMU's migration stream of an unchanged
 * guest differs in the pages that changed, and a zero page that turned non-zero shifts everything after it
 * by 4 KiB, which fixed-size chunks would not survive.
 *
 * Our own code, not a library's: the npm registry has no maintained FastCDC for Node's streams, and the
 * cut points are part of the checkpoint format (a change of `GEAR` or the sizes makes new chunks of old
 * bytes: deduplication with checkpoints made before would stop, their restores would not).
 */
import { createHash } from 'node:crypto';

/**
 * The sizes of version 2 checkpoints, whose chunks are objects of their own (chunked.ts): no chunk is shorter
 * (but the last), nor longer; cuts aim at `AVG_CHUNK_BYTES`. Every object costs an S3 request, so chunks had to
 * be large, and a second hibernation uploaded 60 % of the first (most 1 MiB chunks hold a changed page).
 * Version 3 cuts `PACKED_CHUNKS`, 4 KiB on average, and groups them into packs (packs.ts): bench/feos-s3 measured
 * 65 % of a second stream in new chunks at 1 MiB, 7.8 % at 16 KiB, 5.0 to 5.4 % at 8 KiB, 3.5 % at 4 KiB, 2.5 % at
 * 2 KiB (docs/feos/object-store.md).
 */
export const MIN_CHUNK_BYTES = 256 * 1024;
export const AVG_CHUNK_BYTES = 1024 * 1024;
export const MAX_CHUNK_BYTES = 4 * 1024 * 1024;

/** 256 pseudo-random 32-bit words, fixed for ever: SHA-256 of "feos-cdc-gear-<i>", its first four bytes. */
const GEAR: Int32Array = (() => {
  const t = new Int32Array(256);
  for (let i = 0; i < 256; i++) t[i] = createHash('sha256').update(`feos-cdc-gear-${i}`).digest().readInt32LE(0);
  return t;
})();

/**
 * Chunking parameters: no chunk is shorter than `minBytes` (but the last) nor longer than `maxBytes`; cuts aim
 * at `avgBytes`, a power of two. Part of a checkpoint's format: other sizes cut the same bytes elsewhere.
 */
export interface CdcParams {
  minBytes: number;
  avgBytes: number;
  maxBytes: number;
}

/** The chunks of version 2 manifests (one object each, below `pods/<id>/chunks/`): 1 MiB on average. */
export const LARGE_CHUNKS: CdcParams = { minBytes: MIN_CHUNK_BYTES, avgBytes: AVG_CHUNK_BYTES, maxBytes: MAX_CHUNK_BYTES };

/** Version 3 chunks, grouped into packs (packs.ts): 4 KiB on average, 1 KiB to 32 KiB (docs/feos/object-store.md has the measurements). */
export const PACKED_CHUNKS: CdcParams = { minBytes: 1024, avgBytes: 4096, maxBytes: 32 * 1024 };

/** The masks of normalized chunking (level 2) for an average: the hash's top log2(avg)+2 bits before it, log2(avg)-2 after. */
function masks(p: CdcParams): { hard: number; easy: number } {
  const bits = Math.log2(p.avgBytes);
  if (!Number.isInteger(bits) || bits < 8 || bits > 28 || p.minBytes < 64 || p.minBytes >= p.avgBytes || p.maxBytes <= p.avgBytes) {
    throw new RangeError(`cdc: sizes ${JSON.stringify(p)}: want 64 <= min < avg < max, avg a power of two`);
  }
  const top = (n: number) => ~((2 ** (32 - n) - 1) | 0) | 0;
  return { hard: top(bits + 2), easy: top(bits - 2) };
}

/**
 * A content-defined cutter fed piece by piece, synchronously (the loop that hashes every byte runs without a
 * promise per chunk). The chunks it returns are its own copies or views of buffers it made: they stay valid.
 */
export class ChunkCutter {
  readonly #hard: number;
  readonly #easy: number;
  readonly #p: CdcParams;
  #rest: Buffer = Buffer.alloc(0);

  /** @throws RangeError for sizes that are not a valid set */
  constructor(params: CdcParams = LARGE_CHUNKS) {
    const m = masks(params);
    this.#hard = m.hard;
    this.#easy = m.easy;
    this.#p = params;
  }

  /** The end of the chunk starting at `start`, or -1 when `buf` ends first (and more bytes may come). */
  #cut(buf: Uint8Array, start: number): number {
    const len = buf.length - start;
    if (len <= 0) return -1;
    const { minBytes, avgBytes, maxBytes } = this.#p;
    const hard = this.#hard;
    const easy = this.#easy;
    const limit = start + Math.min(len, maxBytes);
    const mid = Math.min(limit, start + avgBytes);
    const gear = GEAR;
    let fp = 0;
    let i = start + minBytes;
    for (; i < mid; i++) {
      fp = ((fp << 1) + (gear[buf[i] as number] as number)) | 0;
      if ((fp & hard) === 0) return i + 1;
    }
    for (; i < limit; i++) {
      fp = ((fp << 1) + (gear[buf[i] as number] as number)) | 0;
      if ((fp & easy) === 0) return i + 1;
    }
    if (limit - start === maxBytes) return limit;
    return -1;
  }

  /**
   * The cuts that the next piece of the stream completes, without copying it: the end of each chunk as an offset in
   * `data`, ascending. The first chunk begins with `held`, the bytes of the stream before `data` that no cut ended
   * (less than `maxBytes`; empty when the last piece ended on a cut), which the cutter kept as a copy of its own; the
   * bytes after the last cut are kept for the next call (copied: the caller may reuse `data`).
   */
  cut(data: Uint8Array): { held: Buffer; ends: number[] } {
    const held = this.#rest;
    const ends: number[] = [];
    let start = 0;
    if (held.length > 0) {
      // The chunk that began before `data`: its cut is within maxBytes of its start, so the held bytes and the
      // first bytes of `data` decide it (a copy of at most maxBytes, not of the piece).
      const joined = Buffer.concat([held, data.subarray(0, this.#p.maxBytes - held.length)]);
      const end = this.#cut(joined, 0);
      if (end < 0) {
        this.#rest = joined;
        return { held, ends };
      }
      // No cut fell within the held bytes (their scan found none), so this one falls in `data`.
      start = end - held.length;
      ends.push(start);
    }
    for (let end = this.#cut(data, start); end > 0; end = this.#cut(data, start)) {
      ends.push(end);
      start = end;
    }
    this.#rest = Buffer.from(data.subarray(start));
    return { held, ends };
  }

  /** The stream ended: the bytes of its last chunk, which no cut ended (empty: none). */
  finish(): Buffer {
    const last = this.#rest;
    this.#rest = Buffer.alloc(0);
    return last;
  }

  /** Takes the next piece of the stream (copied: the caller may reuse it); returns the chunks it completes. */
  push(data: Uint8Array): Buffer[] {
    const own = Buffer.from(data);
    const { held, ends } = this.cut(own);
    return ends.map((end, i) => {
      const from = i === 0 ? 0 : ends[i - 1]!;
      return i === 0 && held.length > 0 ? Buffer.concat([held, own.subarray(0, end)]) : own.subarray(from, end);
    });
  }

  /** The stream ended: the chunks left. */
  end(): Buffer[] {
    const last = this.finish();
    return last.length > 0 ? [last] : [];
  }
}

/**
 * Cuts a stream into content-defined chunks.
 * @param source the bytes, in pieces of any size
 * @param params the sizes (default: `LARGE_CHUNKS`, version 2's)
 * @returns the chunks in order, each of `minBytes` to `maxBytes` (the last may be shorter); their concatenation
 *   is the stream
 * @throws RangeError for sizes that are not a valid set
 */
export async function* contentDefinedChunks(source: AsyncIterable<Uint8Array>, params: CdcParams = LARGE_CHUNKS): AsyncIterable<Buffer> {
  const cutter = new ChunkCutter(params);
  for await (const data of source) yield* cutter.push(data);
  yield* cutter.end();
}
