/**
 * The K32S snapshot format, version 1: constants and the shapes that the writer takes and the reader
 * gives back. Seed 002, "Snapshot format". The byte layout is documented in `docs/k32s.md`.
 */

/** The version of K32S that this code writes and reads (header bytes 4-5). */
export const K32S_VERSION = 1;
/** The four magic bytes that start every snapshot: ASCII `"K32S"`. */
export const K32S_MAGIC: Readonly<Uint8Array> = Uint8Array.of(0x4b, 0x33, 0x32, 0x53);
/** Size of the fixed header in bytes. */
export const HEADER_BYTES = 68;
/** Size of a section header in bytes: `u16` type, `u32` length. */
export const SECTION_HEADER_BYTES = 6;
/** Size of the trailer in bytes: the SHA-256 of every byte before it. */
export const TRAILER_BYTES = 32;
/** Size of a WebAssembly page in bytes. */
export const WASM_PAGE_BYTES = 65536;
/** Most pages a wasm32 linear memory can have. */
export const MAX_MEMORY_PAGES = 65536;
/**
 * The most sections a snapshot may have (a reader's bound, not the format's). The writer puts at most
 * 4 plus one per table; the bound keeps a stream of empty sections from growing a reader's
 * bookkeeping without end.
 */
export const MAX_SECTIONS = 65536;
/** The table entry (and funcref global value) that stands for `ref.null func`. */
export const NULL_FUNCREF = 0xffffffff;

/** Section types of K32S version 1. A reader skips a type it does not know. */
export const SectionType = { MEMORY: 1, GLOBALS: 2, TABLE: 3, CHANNELS: 4, EVENTS: 5 } as const;
/** A section type known to version 1. */
export type SectionType = (typeof SectionType)[keyof typeof SectionType];
/** The name of a section type as the seed writes it, `UNKNOWN` for any other type. */
export type SectionName = keyof typeof SectionType | 'UNKNOWN';

/**
 * A WebAssembly value type of a mutable global, by its binary encoding: `0x7F` i32, `0x7E` i64,
 * `0x7D` f32, `0x7C` f64, `0x70` funcref.
 */
export type ValType = 0x7f | 0x7e | 0x7d | 0x7c | 0x70;
/** The value types by name. */
export const ValType = { i32: 0x7f, i64: 0x7e, f32: 0x7d, f64: 0x7c, funcref: 0x70 } as const;

/**
 * One mutable global. `bits` is the raw value as a `u64`: i32 and f32 use the low 32 bits (the high
 * 32 bits are 0; an i32 is stored as its two's-complement `u32`, an f32 as its IEEE-754 bits),
 * i64 is its two's-complement `u64`, f64 its IEEE-754 bits, and a funcref the function index or
 * {@link NULL_FUNCREF} for null.
 */
export interface SnapshotGlobal {
  /** Index in the module's global index space (imported globals first). */
  index: number;
  /** Value type. */
  type: ValType;
  /** Raw bits, 0 to 2^64-1. */
  bits: bigint;
}

/** One table: a function index, or {@link NULL_FUNCREF}, for each entry. */
export interface SnapshotTable {
  /** Index in the module's table index space. */
  index: number;
  /** One entry each; the table's size is `entries.length`. */
  entries: Uint32Array;
}

/** A channel the pod opened with `kube32_channel_open`, reopened by name under the same handle. */
export interface SnapshotChannel {
  /** The handle the pod was given, 1 or more. */
  handle: number;
  /** The topic name, UTF-8, 1 to 128 bytes. */
  name: string;
}

/** An event that arrived while the pod was frozen, delivered after the restore. */
export interface HeldEvent {
  /** The topic, UTF-8, 1 to 65535 bytes. */
  topic: string;
  /** The payload bytes. */
  payload: Uint8Array;
}

/** What a writer needs to produce a snapshot: the state of a frozen request pod. */
export interface SnapshotState {
  /** SHA-256 of the module's original bytes, 32 bytes. */
  imageSha256: Uint8Array;
  /**
   * The linear memory to save, exactly `memory bytes` long: pass a view of the live memory (for
   * example `new Uint8Array(memory.buffer, 0, bytes)`); the writer yields views of it and never copies it.
   */
  memory: Uint8Array;
  /** Pages of the linear memory (64 KiB each). Equal to `memory.length / 65536`, except 1 for a pod whose limit is below one page. */
  memoryPages: number;
  /** The value `k32_time_ms` returned when the pod froze, in ms, 0 to 2^64-1. */
  podTimeMs: bigint;
  /** The node's Unix time at the snapshot in ms, 0 when the node clock is unset. */
  unixTimeMs: bigint;
  /** Every mutable global of the module. */
  globals: SnapshotGlobal[];
  /** Every table of the module. */
  tables: SnapshotTable[];
  /** The channels the pod opened. */
  channels: SnapshotChannel[];
  /** The events held while the pod was frozen, in arrival order. */
  events: HeldEvent[];
}

/** The fixed header of a snapshot, as read. */
export interface SnapshotHeader {
  /** Format version, {@link K32S_VERSION}. */
  version: number;
  /** Flags, 0 in version 1. */
  flags: number;
  /** SHA-256 of the module's bytes, 32 bytes. */
  imageSha256: Uint8Array;
  /** Bytes of linear memory in the MEMORY section. */
  memoryBytes: number;
  /** Pages of linear memory the module had. */
  memoryPages: number;
  /** The pod's clock at the snapshot, in ms. */
  podTimeMs: bigint;
  /** The node's Unix time at the snapshot, in ms; 0 when unset. */
  unixTimeMs: bigint;
  /** Number of sections between the header and the trailer. */
  sectionCount: number;
}

/** Where a section lies in a snapshot. */
export interface SectionInfo {
  /** The section type as stored (known or not). */
  type: number;
  /** Its name, `UNKNOWN` for a type version 1 does not define. */
  name: SectionName;
  /** Byte offset of the section's 6-byte header from the start of the snapshot. */
  offset: number;
  /** Length of the section's content in bytes (after its header). */
  length: number;
}

/**
 * What the reader checks a snapshot against: the module being deployed, as the pod runtime sees it
 * after loading (and instrumenting) it.
 */
export interface ModuleShape {
  /** Every mutable global of the module, by global index, with its value type. */
  globals: Map<number, ValType>;
  /** Every table of the module, by table index, with its limits in entries. */
  tables: Map<number, { min: number; max?: number }>;
  /** Number of functions in the module's function index space (imports included); when given, table entries and funcref globals are checked against it. */
  functionCount?: number;
}

/** Options of {@link SnapshotDecoder} and `decodeSnapshot`. */
export interface DecodeOptions {
  /** The digest of the module being deployed; a snapshot of another module is refused (`ImageMismatch`). */
  expectedImageSha256?: Uint8Array;
  /** The most linear memory the pod's limit allows, in bytes; a snapshot holding more is refused (`MemoryLimit`). */
  memoryLimitBytes?: number;
  /** The module's shape; globals and tables that do not match it are refused (`GlobalMismatch`, `TableMismatch`). */
  module?: ModuleShape;
  /**
   * Where the MEMORY section goes. A function is called once, right after the header is read and
   * checked, and returns the destination (at least `header.memoryBytes` long, typically a view of the
   * new instance's memory grown to `header.memoryPages`; growing it again before `end()` would
   * detach that view); the bytes are written straight into it.
   * `'allocate'` gives a new buffer; `'discard'` checks and hashes the bytes without keeping them.
   * @default 'allocate'
   */
  memory?: 'allocate' | 'discard' | ((header: SnapshotHeader) => Uint8Array);
  /**
   * The most bytes a section other than MEMORY may have (they are held in memory while read).
   * @default 16 MiB
   */
  sectionLimitBytes?: number;
  /** Called as each section's header is read, before its content. */
  onSection?: (section: SectionInfo) => void;
  /**
   * Refuse a snapshot whose trailer does not match (`TrailerMismatch`). Turn it off only in tools
   * that report damage (such as `kube32-cli snapshot inspect`); a restore never does.
   * @default true
   */
  verifyTrailer?: boolean;
}

/** A snapshot as read. */
export interface DecodedSnapshot {
  /** The header. */
  header: SnapshotHeader;
  /** The GLOBALS section's entries, in stored order. */
  globals: SnapshotGlobal[];
  /** The TABLE sections, in stored order. */
  tables: SnapshotTable[];
  /** The CHANNELS section's entries. */
  channels: SnapshotChannel[];
  /** The EVENTS section's entries, in arrival order. */
  events: HeldEvent[];
  /** The memory destination (the one given, or a new buffer); absent with `memory: 'discard'`. Holds `header.memoryBytes` bytes of state at its start. */
  memory?: Uint8Array;
  /** Every section's place, in stored order. */
  sections: SectionInfo[];
  /** Types of the sections skipped because version 1 does not know them. */
  unknownSections: number[];
  /** The trailer as stored (the snapshot's SHA-256 when it is intact). */
  snapshotSha256: Uint8Array;
  /** The SHA-256 of the bytes before the trailer, as computed while reading. */
  computedSha256: Uint8Array;
  /** Whether the stored trailer equals the computed digest (always true unless `verifyTrailer` is false). */
  trailerOk: boolean;
  /** Total length of the snapshot in bytes, trailer included. */
  byteLength: number;
}

/** Options of `encodeSnapshot`. */
export interface EncodeOptions {
  /** The most bytes of linear memory in one chunk; each is a view of `state.memory`. @default 1 MiB */
  chunkBytes?: number;
  /**
   * The snapshot's SHA-256 (32 bytes), already computed for this very state by
   * {@link snapshotSha256} or an earlier encode of it (a frozen pod's memory does not change): the
   * writer then does not hash the bytes again and writes these as the trailer. A digest of another
   * state gives a snapshot whose trailer the reader refuses (`TrailerMismatch`).
   */
  sha256?: Uint8Array;
}
