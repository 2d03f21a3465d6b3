/**
 * The K32S reader: push-based, any chunk boundaries, checks everything as the bytes arrive and
 * writes linear memory straight into its destination. Seed 002, "Snapshot format".
 */
import { createHash, type Hash } from 'node:crypto';
import { K32SError, type K32SErrorCode } from './errors.ts';
import { toHex } from './hex.ts';
import {
  checkModuleComplete,
  Cursor,
  GLOBAL_ENTRY_BYTES,
  readChannels,
  readEvents,
  readGlobals,
  readTable,
  sectionName,
} from './sections.ts';
import {
  HEADER_BYTES,
  K32S_MAGIC,
  K32S_VERSION,
  MAX_MEMORY_PAGES,
  MAX_SECTIONS,
  SECTION_HEADER_BYTES,
  SectionType,
  TRAILER_BYTES,
  WASM_PAGE_BYTES,
  type DecodedSnapshot,
  type DecodeOptions,
  type HeldEvent,
  type SectionInfo,
  type SnapshotChannel,
  type SnapshotGlobal,
  type SnapshotHeader,
  type SnapshotTable,
} from './types.ts';

/** The most bytes a section other than MEMORY may have unless `sectionLimitBytes` says otherwise. */
const DEFAULT_SECTION_LIMIT = 16 << 20;


type State = 'header' | 'sectionHead' | 'memory' | 'skip' | 'small' | 'trailer' | 'done' | 'failed';

/**
 * Reads one K32S snapshot pushed to it in chunks of any size (1 byte to all of it), checking it as
 * it goes: magic and version, the image digest against `expectedImageSha256`, memory bytes against
 * `memoryLimitBytes` and the destination, every section's layout, globals and tables against
 * `module`, the trailer against the SHA-256 of the bytes before it, and nothing after the trailer.
 * Sections of unknown types are skipped (and hashed). The MEMORY section is written straight into
 * the destination that `opts.memory` gives; the small sections are held until each is complete.
 *
 * On bad input `push` and `end` throw a {@link K32SError} (and only that), and the decoder stays
 * failed: every later call throws the same error. Memory written before the error is garbage; a
 * restore discards the instance. Errors thrown by `opts.memory` or `opts.onSection` pass through.
 *
 * @example
 * const decoder = new SnapshotDecoder({ expectedImageSha256, memoryLimitBytes, module, memory: (h) => grow(h) });
 * for await (const chunk of body) decoder.push(chunk);
 * const snapshot = decoder.end();
 */
export class SnapshotDecoder {
  readonly #opts: DecodeOptions;
  readonly #sectionLimit: number;
  readonly #hash: Hash = createHash('sha256');
  #hashing = true;
  #state: State = 'header';
  #error: K32SError | undefined;
  #result: DecodedSnapshot | undefined;
  /** Bytes consumed so far. */
  #pos = 0;
  /** Staging for the fixed-size parts: header, section header, trailer. */
  readonly #scratch = new Uint8Array(HEADER_BYTES);
  #fill = 0;
  #header: SnapshotHeader | undefined;
  #sectionsLeft = 0;
  #section: SectionInfo | undefined;
  #remaining = 0;
  #small: Uint8Array | undefined;
  #memory: Uint8Array | undefined;
  #discard = false;
  #memoryAt = 0;
  #sawMemory = false;
  #sawGlobals = false;
  #sawChannels = false;
  #sawEvents = false;
  readonly #globals: SnapshotGlobal[] = [];
  readonly #tables: SnapshotTable[] = [];
  readonly #tableIndices = new Set<number>();
  readonly #channels: SnapshotChannel[] = [];
  readonly #events: HeldEvent[] = [];
  readonly #sections: SectionInfo[] = [];
  readonly #unknown: number[] = [];

  /**
   * @param opts what to check the snapshot against and where its memory goes, see {@link DecodeOptions}.
   * @throws {RangeError} for an option out of range (not a bad snapshot).
   */
  constructor(opts: DecodeOptions = {}) {
    this.#opts = opts;
    this.#sectionLimit = opts.sectionLimitBytes ?? DEFAULT_SECTION_LIMIT;
    if (!Number.isInteger(this.#sectionLimit) || this.#sectionLimit < 0) {
      throw new RangeError(`sectionLimitBytes must be a non-negative integer, got ${opts.sectionLimitBytes}`);
    }
    const limit = opts.memoryLimitBytes;
    if (limit !== undefined && (!Number.isFinite(limit) || limit < 0)) {
      throw new RangeError(`memoryLimitBytes must be a non-negative number, got ${limit}`);
    }
    const image = opts.expectedImageSha256;
    if (image !== undefined && (!(image instanceof Uint8Array) || image.length !== 32)) {
      throw new RangeError('expectedImageSha256 must be 32 bytes');
    }
  }

  /** The header, once its 68 bytes have arrived and passed their checks. */
  get header(): SnapshotHeader | undefined {
    return this.#header;
  }

  /** Bytes pushed and consumed so far. */
  get bytesRead(): number {
    return this.#pos;
  }

  /**
   * Feeds the next bytes of the snapshot. The chunk is not kept (small sections are copied out of it).
   * @throws {K32SError} as soon as the bytes so far cannot be a valid snapshot.
   */
  push(chunk: Uint8Array): void {
    if (this.#error) throw this.#error;
    if (!(chunk instanceof Uint8Array)) throw new TypeError('SnapshotDecoder.push takes a Uint8Array');
    try {
      this.#consume(chunk);
    } catch (err: unknown) {
      this.#state = 'failed';
      if (err instanceof K32SError) this.#error = err;
      else this.#error = new K32SError('Malformed', `the reader stopped: ${err instanceof Error ? err.message : String(err)}`, this.#pos);
      throw err;
    }
  }

  /**
   * Marks the end of the stream and gives the snapshot.
   * @throws {K32SError} `Truncated` when the stream ended before the end of the trailer, or the error
   * a previous `push` threw.
   */
  end(): DecodedSnapshot {
    if (this.#error) throw this.#error;
    if (this.#result) return this.#result;
    if (this.#state !== 'done') {
      this.#error = new K32SError('Truncated', `the snapshot ends before its trailer: the stream ended after ${this.#pos} bytes, ${this.#where()}`, this.#pos);
      this.#state = 'failed';
      throw this.#error;
    }
    throw new K32SError('Malformed', 'internal: no result', this.#pos);
  }

  #where(): string {
    switch (this.#state) {
      case 'header':
        return `inside the ${HEADER_BYTES}-byte header`;
      case 'sectionHead':
        return `inside the header of section ${this.#sections.length + 1} of ${this.#header?.sectionCount}`;
      case 'memory':
      case 'skip':
      case 'small': {
        const s = this.#section!;
        return `inside the ${s.name} section at byte ${s.offset} (${this.#remaining} of its ${s.length} bytes missing)`;
      }
      default:
        return `inside the ${TRAILER_BYTES}-byte trailer`;
    }
  }

  #fail(code: K32SErrorCode, message: string, offset = this.#pos): never {
    throw new K32SError(code, message, offset);
  }

  #consume(chunk: Uint8Array): void {
    const len = chunk.length;
    let i = 0;
    while (i < len) {
      switch (this.#state) {
        case 'header': {
          const n = Math.min(HEADER_BYTES - this.#fill, len - i);
          this.#scratch.set(chunk.subarray(i, i + n), this.#fill);
          const before = this.#fill;
          this.#fill += n;
          i += n;
          this.#pos += n;
          if (before < 6) this.#checkPrefix();
          if (this.#fill === HEADER_BYTES) this.#readHeader();
          break;
        }
        case 'sectionHead': {
          const n = Math.min(SECTION_HEADER_BYTES - this.#fill, len - i);
          this.#scratch.set(chunk.subarray(i, i + n), this.#fill);
          this.#fill += n;
          i += n;
          this.#pos += n;
          if (this.#fill === SECTION_HEADER_BYTES) this.#startSection();
          break;
        }
        case 'memory': {
          const n = Math.min(this.#remaining, len - i);
          if (!this.#discard) this.#memory!.set(chunk.subarray(i, i + n), this.#memoryAt);
          this.#memoryAt += n;
          this.#remaining -= n;
          i += n;
          this.#pos += n;
          if (this.#remaining === 0) this.#endSection();
          break;
        }
        case 'skip': {
          const n = Math.min(this.#remaining, len - i);
          this.#remaining -= n;
          i += n;
          this.#pos += n;
          if (this.#remaining === 0) this.#endSection();
          break;
        }
        case 'small': {
          const n = Math.min(this.#remaining, len - i);
          const buf = this.#small!;
          buf.set(chunk.subarray(i, i + n), buf.length - this.#remaining);
          this.#remaining -= n;
          i += n;
          this.#pos += n;
          if (this.#remaining === 0) {
            this.#readSmall(buf);
            this.#small = undefined;
            this.#endSection();
          }
          break;
        }
        case 'trailer': {
          if (this.#hashing) {
            // The bytes of this chunk before `i` are the last ones before the trailer.
            this.#hash.update(chunk.subarray(0, i));
            this.#hashing = false;
          }
          const n = Math.min(TRAILER_BYTES - this.#fill, len - i);
          this.#scratch.set(chunk.subarray(i, i + n), this.#fill);
          this.#fill += n;
          i += n;
          this.#pos += n;
          if (this.#fill === TRAILER_BYTES) this.#finish();
          break;
        }
        case 'done':
          this.#fail('Malformed', `the snapshot has ${len - i} or more bytes after its trailer`);
          break;
        default:
          throw this.#error;
      }
    }
    if (this.#hashing) this.#hash.update(chunk);
  }

  /** Refuses a stream that is not K32S as soon as its first bytes show it. */
  #checkPrefix(): void {
    const s = this.#scratch;
    for (let k = 0; k < Math.min(this.#fill, 4); k++) {
      if (s[k] !== K32S_MAGIC[k]) {
        const seen = toHex(s.subarray(0, Math.min(this.#fill, 4)));
        this.#fail('BadMagic', `not a K32S snapshot: it starts with bytes ${seen}, not the magic "K32S" (4b333253)`, 0);
      }
    }
    if (this.#fill >= 6) {
      const version = s[4]! | (s[5]! << 8);
      if (version !== K32S_VERSION) {
        this.#fail('BadVersion', `the snapshot is K32S version ${version}; this node reads version ${K32S_VERSION}`, 4);
      }
    }
  }

  #readHeader(): void {
    const s = this.#scratch;
    const v = new DataView(s.buffer, 0, HEADER_BYTES);
    const header: SnapshotHeader = {
      version: v.getUint16(4, true),
      flags: v.getUint16(6, true),
      imageSha256: s.slice(8, 40),
      memoryBytes: v.getUint32(40, true),
      memoryPages: v.getUint32(44, true),
      podTimeMs: v.getBigUint64(48, true),
      unixTimeMs: v.getBigUint64(56, true),
      sectionCount: v.getUint32(64, true),
    };
    if (header.flags !== 0) {
      this.#fail('Malformed', `the header's flags are 0x${header.flags.toString(16).padStart(4, '0')}; K32S version 1 defines none`, 6);
    }
    const expected = this.#opts.expectedImageSha256;
    if (expected && !equalBytes(expected, header.imageSha256)) {
      this.#fail(
        'ImageMismatch',
        `the snapshot was taken from the module sha256:${toHex(header.imageSha256)}, not from the module being deployed (sha256:${toHex(expected)})`,
        8,
      );
    }
    const { memoryBytes: bytes, memoryPages: pages } = header;
    if (pages > MAX_MEMORY_PAGES) {
      this.#fail('Malformed', `the header says ${pages} memory pages; a wasm32 memory has at most ${MAX_MEMORY_PAGES}`, 44);
    }
    if (bytes !== pages * WASM_PAGE_BYTES && !(pages === 1 && bytes < WASM_PAGE_BYTES)) {
      this.#fail(
        'Malformed',
        `the header's memory bytes (${bytes}) do not agree with its memory pages (${pages}): they must be pages × 65536, or below 65536 with 1 page`,
        40,
      );
    }
    const limit = this.#opts.memoryLimitBytes;
    if (limit !== undefined && bytes > limit) {
      this.#fail('MemoryLimit', `the snapshot holds ${bytes} bytes of linear memory, more than the pod's memory limit of ${limit} bytes`, 40);
    }
    if (header.sectionCount > MAX_SECTIONS) {
      this.#fail('Malformed', `the header says ${header.sectionCount} sections; this reader takes at most ${MAX_SECTIONS}`, 64);
    }
    this.#header = header;
    this.#sectionsLeft = header.sectionCount;
    const dest = this.#opts.memory ?? 'allocate';
    if (dest === 'discard') {
      this.#discard = true;
    } else if (dest === 'allocate') {
      try {
        this.#memory = new Uint8Array(bytes);
      } catch {
        this.#fail('MemoryLimit', `cannot allocate ${bytes} bytes for the snapshot's linear memory`, 40);
      }
    } else {
      const memory = dest(header);
      if (!(memory instanceof Uint8Array)) throw new TypeError('the memory option must return a Uint8Array');
      if (memory.length < bytes) {
        this.#fail('MemoryLimit', `the snapshot holds ${bytes} bytes of linear memory; the pod's memory has only ${memory.length}`, 40);
      }
      this.#memory = memory;
    }
    this.#fill = 0;
    this.#nextSection();
  }

  #nextSection(): void {
    if (this.#sectionsLeft > 0) {
      this.#state = 'sectionHead';
      return;
    }
    this.#checkComplete();
    this.#state = 'trailer';
  }

  #startSection(): void {
    const v = new DataView(this.#scratch.buffer, 0, SECTION_HEADER_BYTES);
    const type = v.getUint16(0, true);
    const length = v.getUint32(2, true);
    const offset = this.#pos - SECTION_HEADER_BYTES;
    const info: SectionInfo = { type, name: sectionName(type), offset, length };
    this.#fill = 0;
    this.#sectionsLeft--;
    this.#section = info;
    this.#sections.push(info);
    this.#opts.onSection?.(info);
    this.#remaining = length;
    const header = this.#header!;
    switch (type) {
      case SectionType.MEMORY:
        if (this.#sawMemory) this.#fail('Malformed', `the snapshot has a second MEMORY section at byte ${offset}`, offset);
        this.#sawMemory = true;
        if (length !== header.memoryBytes) {
          this.#fail('Malformed', `the MEMORY section is ${length} bytes long; the header says memory bytes ${header.memoryBytes}`, offset + 2);
        }
        this.#state = 'memory';
        break;
      case SectionType.GLOBALS:
      case SectionType.TABLE:
      case SectionType.CHANNELS:
      case SectionType.EVENTS:
        this.#checkSmallHead(info);
        this.#state = 'small';
        this.#small = new Uint8Array(length);
        break;
      default:
        this.#unknown.push(type);
        this.#state = 'skip';
    }
    if (length === 0) {
      if (this.#state === 'small') this.#readSmall(this.#small!);
      this.#endSection();
    }
  }

  #checkSmallHead(info: SectionInfo): void {
    const { type, name, offset, length } = info;
    const once = (seen: boolean): void => {
      if (seen) this.#fail('Malformed', `the snapshot has a second ${name} section at byte ${offset}`, offset);
    };
    if (type === SectionType.GLOBALS) {
      once(this.#sawGlobals);
      this.#sawGlobals = true;
      if (length % GLOBAL_ENTRY_BYTES !== 0) {
        this.#fail('Malformed', `the GLOBALS section is ${length} bytes long, not a multiple of ${GLOBAL_ENTRY_BYTES} (one entry each)`, offset + 2);
      }
    } else if (type === SectionType.TABLE) {
      if (length < 8 || (length - 8) % 4 !== 0) {
        this.#fail('Malformed', `the TABLE section at byte ${offset} is ${length} bytes long; a table takes 8 + 4 × size`, offset + 2);
      }
    } else if (type === SectionType.CHANNELS) {
      once(this.#sawChannels);
      this.#sawChannels = true;
    } else {
      once(this.#sawEvents);
      this.#sawEvents = true;
    }
    if (length > this.#sectionLimit) {
      this.#fail('Malformed', `the ${name} section at byte ${offset} is ${length} bytes long, more than this reader takes (${this.#sectionLimit})`, offset + 2);
    }
  }

  #endSection(): void {
    this.#section = undefined;
    this.#nextSection();
  }

  #readSmall(buf: Uint8Array): void {
    const info = this.#section!;
    const c = new Cursor(buf, info.offset + SECTION_HEADER_BYTES, info.name);
    switch (info.type) {
      case SectionType.GLOBALS:
        readGlobals(c, this.#opts.module, this.#globals);
        break;
      case SectionType.TABLE:
        readTable(c, this.#opts.module, this.#tables, this.#tableIndices);
        break;
      case SectionType.CHANNELS:
        readChannels(c, this.#channels);
        break;
      default:
        readEvents(c, this.#events);
    }
  }

  /** Checks, once every section is read, that nothing the header or the module needs is missing. */
  #checkComplete(): void {
    const header = this.#header!;
    if (!this.#sawMemory && header.memoryBytes > 0) {
      this.#fail('Malformed', `the header says ${header.memoryBytes} bytes of memory but the snapshot has no MEMORY section`);
    }
    const module = this.#opts.module;
    if (module) checkModuleComplete(module, this.#globals, this.#tables, this.#pos);
  }

  #finish(): void {
    const stored = this.#scratch.slice(0, TRAILER_BYTES);
    const computed = new Uint8Array(this.#hash.digest());
    const ok = equalBytes(stored, computed);
    if (!ok && this.#opts.verifyTrailer !== false) {
      this.#fail(
        'TrailerMismatch',
        "the snapshot's trailer does not match its contents (damaged in transfer or storage)",
        this.#pos - TRAILER_BYTES,
      );
    }
    this.#state = 'done';
    this.#result = {
      header: this.#header!,
      globals: this.#globals,
      tables: this.#tables,
      channels: this.#channels,
      events: this.#events,
      ...(this.#discard ? {} : { memory: this.#memory! }),
      sections: this.#sections,
      unknownSections: this.#unknown,
      snapshotSha256: stored,
      computedSha256: computed,
      trailerOk: ok,
      byteLength: this.#pos,
    };
  }
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let k = 0; k < a.length; k++) if (a[k] !== b[k]) return false;
  return true;
}

/**
 * Reads a whole snapshot from `source` (a stream such as an HTTP response or `fs.createReadStream`,
 * or an array of chunks) with a {@link SnapshotDecoder}.
 * @throws {K32SError} when the snapshot is refused (see {@link SnapshotDecoder}); errors of the
 * source itself pass through.
 */
export async function decodeSnapshot(
  source: AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
  opts?: DecodeOptions,
): Promise<DecodedSnapshot> {
  const decoder = new SnapshotDecoder(opts);
  for await (const chunk of source) decoder.push(chunk);
  return decoder.end();
}
