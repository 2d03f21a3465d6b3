/**
 * Files kept as small content-defined chunks grouped into packs (as restic and borg do): the chunks a store
 * lacks are appended to a pack of about `PACK_BYTES`, one object `<prefix>/<pack>` each, uploaded as it fills,
 * several at once; a file is its list of chunks, each located as (pack, offset, length, SHA-256), which the
 * caller keeps (a checkpoint's manifest, written last). Small chunks find what changed closely (a page of a
 * migration stream), packs keep the number of objects small (one PUT per several MiB: an S3 server answers each
 * request in tens of milliseconds). Reading fetches byte ranges of the packs in parallel, checks every chunk's
 * SHA-256 and writes it at its place in the file (seed 000, "Hibernate and Restore"; docs/feos/object-store.md).
 */
import { randomBytes } from 'node:crypto';
import type { FileHandle } from 'node:fs/promises';
import { type CdcParams, PACKED_CHUNKS } from './cdc.ts';
import { type CutChunks, hashPool, type HashPool } from './hash-pool.ts';
import { type ObjectStore, ObjectStoreError } from './store.ts';

/** Where a chunk is: its pack, its offset and length in it (bytes), its SHA-256 (lowercase hex). */
export interface PackedChunk {
  pack: string;
  offset: number;
  sizeBytes: number;
  sha256: string;
}

/** The chunks a store has, by SHA-256 (built from the manifests that are kept, plus what a writer adds). */
export type ChunkIndex = Map<string, PackedChunk>;

/** A file as `PackWriter.putFile` stored it. */
export interface PackedFile {
  /** The whole file's size (bytes) and SHA-256. */
  sizeBytes: number;
  sha256: string;
  /** Its chunks, in order. */
  chunks: PackedChunk[];
}

/** A pack is sealed and uploaded once it holds this many bytes (a chunk more at most). */
export const PACK_BYTES = 8 * 1024 * 1024;
/** How many pack uploads run at once. */
export const PACK_UPLOADS_AT_ONCE = 6;
/** How many ranged GETs a read runs at once, and the longest range (bytes). */
export const RANGES_AT_ONCE = 8;
export const RANGE_BYTES = 16 * 1024 * 1024;
/**
 * How many pieces of a file (as read: 1 MiB each from a file) are with the hash pool at once while `putFile` cuts
 * it: the writer's packs lag the bytes read by as much.
 */
export const PIECES_AT_ONCE = 4;
/** Bytes of a pack that a range reads past to reach the next chunk, rather than making another request. */
const RANGE_GAP_BYTES = 64 * 1024;

const PACK_NAME = /^[0-9a-f]{32}$/;

/** The pieces a file is read in to be cut (bytes). */
export const PIECE_BYTES = 1024 * 1024;
/** How many read buffers `PieceBuffers` keeps for reuse: the pieces with the hash pool, and those being read. */
const SPARE_PIECES = PIECES_AT_ONCE + 4;

/**
 * Buffers of `PIECE_BYTES` that a file is read into for `PackWriter.putFile`, which gives each back once it has
 * copied its chunks into a pack, so that the next read reuses it: a fresh buffer of 1 MiB costs the kernel's page
 * faults at its first write, and a hibernation's 180 MiB read into fresh buffers cost a tenth to a quarter of a
 * second of CPU here (bench/feos-s3), against a few milliseconds into buffers that were written before.
 */
export class PieceBuffers {
  readonly #spare: Buffer[] = [];
  /** The memory of the buffers it gave: only those are handed to the hash pool without a copy. */
  readonly #mine = new WeakSet<ArrayBufferLike>();

  /** A buffer of `PIECE_BYTES` (a whole ArrayBuffer of its own, which the hash pool takes without a copy). */
  take(): Buffer {
    const buf = this.#spare.pop() ?? Buffer.allocUnsafeSlow(PIECE_BYTES);
    this.#mine.add(buf.buffer);
    return buf;
  }

  /** Whether `data` is a whole buffer `take` gave. */
  owns(data: Uint8Array): boolean {
    return data.byteOffset === 0 && data.byteLength === PIECE_BYTES && data.buffer.byteLength === PIECE_BYTES && this.#mine.has(data.buffer);
  }

  /** Gives back a buffer `take` gave, once its reader is done with it (back from the hash pool, it is another object of the same memory). */
  give(buf: Buffer): void {
    if (buf.byteLength === PIECE_BYTES && buf.byteOffset === 0 && buf.buffer.byteLength === PIECE_BYTES && this.#spare.length < SPARE_PIECES) this.#spare.push(buf);
  }
}

/** How long `RangeBuffers` keeps its spare buffers after their last use (ms): a restore's files, one after the other. */
const RANGE_BUFFERS_KEPT_MS = 10_000;

/**
 * Buffers that `readPacked` reads ranges into, reused across its ranges and the files of a restore (the memory,
 * the disk, the volumes, one after the other): a fresh buffer of a pack's size costs the kernel's page faults at its
 * first write and the collector's time after (bench/s3-restore-copy). At most `RANGES_AT_ONCE` are kept, and none
 * once unused for `RANGE_BUFFERS_KEPT_MS` (feosd does not hold a restore's 64 MiB while it runs pods).
 */
export class RangeBuffers {
  #spare: Buffer[] = [];
  #timer: NodeJS.Timeout | undefined;

  /** A buffer of at least `bytes` (a pack's size at least, when more than a piece's, so that it serves any range after). */
  take(bytes: number): Buffer {
    const i = this.#spare.findIndex((b) => b.byteLength >= bytes);
    if (i >= 0) return this.#spare.splice(i, 1)[0]!;
    return Buffer.allocUnsafeSlow(bytes <= PIECE_BYTES ? bytes : Math.max(bytes, PACK_BYTES + PACKED_CHUNKS.maxBytes));
  }

  /** Gives back a buffer `take` gave (or the same memory back from the hash pool) once nothing reads or writes it. */
  give(buf: Buffer): void {
    if (this.#spare.length < RANGES_AT_ONCE) this.#spare.push(buf);
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#spare = [];
    }, RANGE_BUFFERS_KEPT_MS);
    this.#timer.unref();
  }
}

const rangeBuffers = new RangeBuffers();

/** The key of a pack below `prefix`. */
export function packKey(prefix: string, pack: string): string {
  return `${prefix}/${pack}`;
}

/** Whether a name is a pack's (32 lowercase hex digits). */
export function isPackName(name: string): boolean {
  return PACK_NAME.test(name);
}

/**
 * Writes files as packed chunks below `prefix`: a chunk `index` names is not stored again (nor one this writer
 * stored already); the others go into packs. One writer for all the files of a checkpoint, so that packs fill
 * across them; `finish` uploads the last pack and waits for every upload.
 */
export class PackWriter {
  readonly #store: ObjectStore;
  readonly #prefix: string;
  readonly #index: ChunkIndex;
  readonly #params: CdcParams;
  readonly #signal?: AbortSignal;
  readonly #pool: HashPool;
  readonly #inFlight = new Set<Promise<void>>();
  #failed: unknown;
  #pack = randomBytes(16).toString('hex');
  /** The pack being filled: the chunks' bytes copied one after the other (a buffer reused once its upload is done). */
  #buf: Buffer | undefined;
  #fill = 0;
  /** Packs' buffers whose uploads are done, to fill again (fresh ones cost their page faults, as pieces do). */
  readonly #spare: Buffer[] = [];
  /** The buffers files are read into for `putFile`; each is given back once its chunks are copied. */
  readonly pieces: PieceBuffers;
  /** The bytes of the packs uploaded (the chunks the store lacked). */
  uploadedBytes = 0;
  /** The keys of the packs this writer created (to withdraw them when no manifest names them). */
  readonly created: string[] = [];
  /** How long the uploads of full packs made `putFile` wait (ms): the store was the slower side. */
  waitedMs = 0;

  /**
   * @param options.pool the workers that cut and hash (default: the process's, hash-pool.ts)
   * @param options.pieces the read buffers its sources take (default: its own)
   */
  constructor(store: ObjectStore, prefix: string, index: ChunkIndex, options: { params?: CdcParams; signal?: AbortSignal; pool?: HashPool; pieces?: PieceBuffers } = {}) {
    this.#pool = options.pool ?? hashPool();
    this.pieces = options.pieces ?? new PieceBuffers();
    this.#store = store;
    this.#prefix = prefix;
    this.#index = index;
    this.#params = options.params ?? PACKED_CHUNKS;
    this.#signal = options.signal;
  }

  #check(): void {
    this.#signal?.throwIfAborted();
    if (this.#failed) throw this.#failed;
  }

  #seal(): void {
    const buf = this.#buf;
    if (!buf || this.#fill === 0) return;
    const body = buf.subarray(0, this.#fill);
    const key = packKey(this.#prefix, this.#pack);
    this.#pack = randomBytes(16).toString('hex');
    this.#buf = undefined;
    this.#fill = 0;
    const p = this.#store
      .put(key, body, { signal: this.#signal, unhashed: true })
      .then(() => {
        this.uploadedBytes += body.byteLength;
        this.created.push(key);
        // The store is done with the bytes (a failed put's may still be with the HTTP layer: not reused).
        this.#spare.push(buf);
      })
      .catch((err: unknown) => {
        this.#failed ??= err;
      })
      .finally(() => this.#inFlight.delete(p));
    this.#inFlight.add(p);
  }

  #add(chunk: Buffer, sha256: string, chunks: PackedChunk[]): void {
    let at = this.#index.get(sha256);
    if (!at) {
      // A pack holds PACK_BYTES and the chunk that crossed it at most.
      this.#buf ??= this.#spare.pop() ?? Buffer.allocUnsafeSlow(PACK_BYTES + this.#params.maxBytes);
      at = { pack: this.#pack, offset: this.#fill, sizeBytes: chunk.byteLength, sha256 };
      chunk.copy(this.#buf, this.#fill);
      this.#fill += chunk.byteLength;
      this.#index.set(sha256, at);
      if (this.#fill >= PACK_BYTES) this.#seal();
    }
    chunks.push(at);
  }

  /**
   * Stores one file.
   * @param source its bytes in pieces (copied: the source may reuse them), but for the buffers of `pieces`, which go
   *   to the hash pool without a copy and are given back once their chunks are in packs, for the source to read into
   *   again (`fileChunks(path, signal, writer.pieces)`): the source must not use them meanwhile
   * @param onProgress the file's bytes read so far
   * @throws ObjectStoreError from the store (a pack upload that failed); the signal's reason when it aborts
   *   (the packs uploaded so far stay: `created`, or a later prune, removes them)
   */
  async putFile(source: AsyncIterable<Uint8Array>, onProgress?: (bytes: number) => void): Promise<PackedFile> {
    // A worker cuts and hashes the pieces in order while this thread reads the next ones and uploads the packs.
    const session = this.#pool.chunker(this.#params);
    const cutting: Array<Promise<CutChunks & { handedOver?: boolean }>> = [];
    const chunks: PackedChunk[] = [];
    const take = (cut: CutChunks & { handedOver?: boolean }) => {
      for (const [i, c] of cut.chunks.entries()) this.#add(c, cut.sha256s[i]!, chunks);
      // Its chunks are copied into packs (or were there): a piece of `pieces` is read into again.
      if (cut.piece && cut.handedOver) this.pieces.give(cut.piece);
    };
    let size = 0;
    try {
      for await (const data of source) {
        this.#check();
        size += data.byteLength;
        const mine = this.pieces.owns(data);
        const p = session.push(data, mine).then((cut) => ({ ...cut, handedOver: mine }));
        // A failure is seen when its turn comes; until then it must not count as unhandled.
        p.catch(() => {});
        cutting.push(p);
        while (cutting.length >= PIECES_AT_ONCE) take(await cutting.shift()!);
        // Reading waits while the uploads are many (memory stays at about PACK_UPLOADS_AT_ONCE packs).
        if (this.#inFlight.size >= PACK_UPLOADS_AT_ONCE) {
          const t0 = performance.now();
          while (this.#inFlight.size >= PACK_UPLOADS_AT_ONCE) await Promise.race(this.#inFlight);
          this.waitedMs += performance.now() - t0;
        }
        onProgress?.(size);
      }
      while (cutting.length > 0) take(await cutting.shift()!);
    } catch (err: unknown) {
      // The session ends on its worker all the same; its answers are awaited so that none is left over.
      await Promise.allSettled([...cutting, session.end()]);
      throw err;
    }
    const last = await session.end();
    take(last);
    this.#check();
    if (last.sizeBytes !== size) throw new Error(`pack writer: the hash worker saw ${last.sizeBytes} bytes of ${size}`);
    return { sizeBytes: size, sha256: last.sha256, chunks };
  }

  /** Uploads the last pack and waits for every upload. @throws as `putFile` */
  async finish(): Promise<void> {
    this.#check();
    this.#seal();
    while (this.#inFlight.size > 0) await Promise.race(this.#inFlight);
    this.#check();
  }

  /** Waits for the uploads in flight, ignoring their failures (before withdrawing what was created). */
  async settle(): Promise<void> {
    await Promise.allSettled([...this.#inFlight]);
  }
}

/** A range of a pack that a read fetches, and the chunks in it with their places in the file. */
interface Range {
  pack: string;
  start: number;
  end: number;
  chunks: Array<{ chunk: PackedChunk; fileOffset: number }>;
}

/**
 * The ranges that read a file's chunks: per pack, its chunks by offset, neighbours (less than `RANGE_GAP_BYTES`
 * apart) in one range of at most `RANGE_BYTES`; a chunk the file holds twice is fetched once.
 */
function rangesOf(chunks: PackedChunk[]): Range[] {
  const byPack = new Map<string, Array<{ chunk: PackedChunk; fileOffset: number }>>();
  let fileOffset = 0;
  for (const c of chunks) {
    let list = byPack.get(c.pack);
    if (!list) {
      list = [];
      byPack.set(c.pack, list);
    }
    list.push({ chunk: c, fileOffset });
    fileOffset += c.sizeBytes;
  }
  const out: Range[] = [];
  for (const [pack, list] of byPack) {
    list.sort((x, y) => x.chunk.offset - y.chunk.offset || x.fileOffset - y.fileOffset);
    let cur: Range | undefined;
    for (const e of list) {
      const end = e.chunk.offset + e.chunk.sizeBytes;
      if (cur && e.chunk.offset <= cur.end + RANGE_GAP_BYTES && Math.max(cur.end, end) - cur.start <= RANGE_BYTES) {
        cur.end = Math.max(cur.end, end);
      } else {
        cur = { pack, start: e.chunk.offset, end, chunks: [] };
        out.push(cur);
      }
      cur.chunks.push(e);
    }
  }
  return out;
}

/**
 * Reads a packed file into `fh` (from its offset 0), each chunk written at its place: ranged GETs of the packs,
 * `RANGES_AT_ONCE` at a time, every chunk checked against its SHA-256 (on the hash pool's workers, `options.pool` or
 * the process's) before it is written. The file is the chunks in order, so their checks are the whole file's.
 * Each range is read into a buffer of `options.buffers` (default: the process's), which goes to the hash worker and
 * back without a copy; the chunks are written from it, a run of chunks that follow each other in one write.
 * @param onWriteError wraps a failed write to `fh` (so that the caller can tell the node's disk from the store)
 * @returns the file's size (bytes) and how many GETs read it
 * @throws ObjectNotFoundError (store.ts) for a missing pack; ObjectStoreError (failure `damaged`) naming the pack
 *   and the chunk when its bytes differ; ObjectStoreError from the store; what `onWriteError` returns
 */
export async function readPacked(
  store: ObjectStore,
  prefix: string,
  chunks: PackedChunk[],
  fh: FileHandle,
  options: { signal?: AbortSignal; onWriteError?: (err: unknown) => Error; rangesAtOnce?: number; pool?: HashPool; buffers?: RangeBuffers } = {},
): Promise<{ sizeBytes: number; requests: number }> {
  const ranges = rangesOf(chunks);
  // The buffers the ranges are read into, reused once a range's chunks are written (as many as GETs in flight, each of
  // the longest range's size at least: about a pack's): fresh ones cost their page faults and the collector's time.
  const bufferBytes = ranges.reduce((n, r) => Math.max(n, r.end - r.start), 0);
  const buffers = options.buffers ?? rangeBuffers;
  let next = 0;
  let failed: unknown;
  const write = async (bytes: Uint8Array, from: number, length: number, at: number) => {
    try {
      await fh.write(bytes, from, length, at);
    } catch (err: unknown) {
      throw options.onWriteError ? options.onWriteError(err) : err;
    }
  };
  const pool = options.pool ?? hashPool();
  const one = async (r: Range) => {
    const key = packKey(prefix, r.pack);
    const into = buffers.take(bufferBytes);
    await store.getRange(key, r.start, r.end - r.start, { signal: options.signal, into });
    // Each chunk once (a chunk the file holds twice is one span), hashed on a worker while other ranges download: the
    // whole buffer goes there and back transferred, not copied, each chunk hashed in place (crypto.hash of a view).
    const spans: Array<[number, number]> = [];
    const shaAt = new Map<number, number>();
    for (const { chunk } of r.chunks) {
      if (shaAt.has(chunk.offset)) continue;
      shaAt.set(chunk.offset, spans.length);
      spans.push([chunk.offset - r.start, chunk.sizeBytes]);
    }
    const { bytes, sha256s } = await pool.digests(into, spans);
    // Chunks that follow each other in the pack and in the file: one write for each such run.
    let run: { from: number; to: number; fileOffset: number } | undefined;
    for (const { chunk, fileOffset } of r.chunks) {
      const from = chunk.offset - r.start;
      const sha = sha256s[shaAt.get(chunk.offset)!]!;
      if (sha !== chunk.sha256) {
        throw new ObjectStoreError(key, `${store.url}: pack ${key}: the chunk at bytes ${chunk.offset} to ${chunk.offset + chunk.sizeBytes - 1} has SHA-256 ${sha}, not ${chunk.sha256} (damaged in storage or transfer)`, {
          failure: 'damaged',
        });
      }
      if (run && run.to === from && run.fileOffset + (run.to - run.from) === fileOffset) {
        run.to += chunk.sizeBytes;
        continue;
      }
      if (run) await write(bytes, run.from, run.to - run.from, run.fileOffset);
      run = { from, to: from + chunk.sizeBytes, fileOffset };
    }
    if (run) await write(bytes, run.from, run.to - run.from, run.fileOffset);
    // Written (a range that failed keeps its buffer: a write of it may still be with the kernel's thread pool).
    buffers.give(bytes);
  };
  const worker = async () => {
    while (!failed && next < ranges.length) {
      const r = ranges[next++]!;
      try {
        await one(r);
      } catch (err: unknown) {
        failed ??= err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(options.rangesAtOnce ?? RANGES_AT_ONCE, ranges.length) }, worker));
  if (failed) throw failed;
  return { sizeBytes: chunks.reduce((n, c) => n + c.sizeBytes, 0), requests: ranges.length };
}

/** The packs below `prefix`, by name. @throws ObjectStoreError when the store fails */
export async function listPacks(store: ObjectStore, prefix: string): Promise<Set<string>> {
  const have = new Set<string>();
  for (const k of await store.list(prefix)) {
    const name = k.slice(prefix.length + 1);
    if (isPackName(name)) have.add(name);
  }
  return have;
}

/**
 * Removes the packs below `prefix` that `keep` does not name (a pack some kept chunk is in stays whole).
 * @returns how many were removed
 * @throws ObjectStoreError from the store (what was removed stays removed)
 */
export async function prunePacks(store: ObjectStore, prefix: string, keep: Set<string>): Promise<number> {
  let removed = 0;
  for (const name of await listPacks(store, prefix)) {
    if (keep.has(name)) continue;
    await store.delete(packKey(prefix, name));
    removed++;
  }
  return removed;
}
