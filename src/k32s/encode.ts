/**
 * The K32S writer: a snapshot as a sequence of chunks, linear memory as views of the live memory.
 * Seed 002, "Snapshot format".
 */
import { createHash } from 'node:crypto';
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
  type EncodeOptions,
  type SnapshotState,
} from './types.ts';

const GLOBAL_ENTRY_BYTES = 13;
const U32_MAX = 0xffffffff;
const U64_MAX = (1n << 64n) - 1n;
const UINT32_MAX_BIG = 0xffffffffn;
const VAL_TYPES = new Set([0x7f, 0x7e, 0x7d, 0x7c, 0x70]);
const utf8 = new TextEncoder();

/** The sizes of a state's small sections, and its UTF-8 strings encoded once. */
interface Layout {
  globals: number;
  tables: number[];
  channels: number;
  events: number;
  channelNames: Uint8Array[];
  eventTopics: Uint8Array[];
}

function fail(field: string, why: string): never {
  throw new RangeError(`K32S snapshot state: ${field} ${why}`);
}

function checkU32(field: string, value: number): void {
  if (!Number.isInteger(value) || value < 0 || value > U32_MAX) fail(field, `must be an integer from 0 to 2^32-1, got ${value}`);
}

function checkU64(field: string, value: bigint): void {
  if (typeof value !== 'bigint' || value < 0n || value > U64_MAX) fail(field, `must be a bigint from 0 to 2^64-1, got ${String(value)}`);
}

/** Checks `state` against what version 1 can hold and measures its small sections. */
function layout(state: SnapshotState): Layout {
  if (!(state.imageSha256 instanceof Uint8Array) || state.imageSha256.length !== 32) fail('imageSha256', 'must be 32 bytes');
  if (!(state.memory instanceof Uint8Array)) fail('memory', 'must be a Uint8Array');
  const bytes = state.memory.length;
  checkU32('memory.length', bytes);
  const pages = state.memoryPages;
  if (!Number.isInteger(pages) || pages < 0 || pages > MAX_MEMORY_PAGES) fail('memoryPages', `must be 0 to ${MAX_MEMORY_PAGES}, got ${pages}`);
  if (bytes !== pages * WASM_PAGE_BYTES && !(pages === 1 && bytes < WASM_PAGE_BYTES)) {
    fail('memory.length', `(${bytes} bytes) must be memoryPages × 64 KiB (${pages} pages), or less than one page with memoryPages 1`);
  }
  checkU64('podTimeMs', state.podTimeMs);
  checkU64('unixTimeMs', state.unixTimeMs);
  const seenGlobals = new Set<number>();
  for (const g of state.globals) {
    checkU32('globals[].index', g.index);
    if (seenGlobals.has(g.index)) fail('globals', `list global ${g.index} twice`);
    seenGlobals.add(g.index);
    if (!VAL_TYPES.has(g.type)) fail(`global ${g.index} type`, `must be 0x7F, 0x7E, 0x7D, 0x7C or 0x70, got ${g.type}`);
    checkU64(`global ${g.index} bits`, g.bits);
    if ((g.type === 0x7f || g.type === 0x7d || g.type === 0x70) && g.bits > UINT32_MAX_BIG) {
      fail(`global ${g.index} bits`, `of a 32-bit value must be below 2^32, got ${g.bits}`);
    }
  }
  if (state.tables.length > MAX_SECTIONS - 4) fail('tables', `are ${state.tables.length}; a snapshot holds at most ${MAX_SECTIONS - 4}`);
  const seenTables = new Set<number>();
  const tables: number[] = [];
  for (const t of state.tables) {
    checkU32('tables[].index', t.index);
    if (seenTables.has(t.index)) fail('tables', `list table ${t.index} twice`);
    seenTables.add(t.index);
    if (!(t.entries instanceof Uint32Array)) fail(`table ${t.index} entries`, 'must be a Uint32Array');
    const length = 8 + 4 * t.entries.length;
    if (length > U32_MAX) fail(`table ${t.index}`, 'is too large for one section');
    tables.push(length);
  }
  const channelNames: Uint8Array[] = [];
  const seenHandles = new Set<number>();
  let channels = 0;
  for (const c of state.channels) {
    checkU32('channels[].handle', c.handle);
    if (c.handle === 0) fail('channels[].handle', 'must be 1 or more');
    if (seenHandles.has(c.handle)) fail('channels', `list handle ${c.handle} twice`);
    seenHandles.add(c.handle);
    const name = utf8.encode(c.name);
    if (name.length === 0 || name.length > 128) fail(`channel ${c.handle} name`, `must be 1 to 128 bytes of UTF-8, got ${name.length}`);
    channelNames.push(name);
    channels += 6 + name.length;
  }
  const eventTopics: Uint8Array[] = [];
  let events = 0;
  for (const e of state.events) {
    const topic = utf8.encode(e.topic);
    if (topic.length === 0 || topic.length > 0xffff) fail('events[].topic', `must be 1 to 65535 bytes of UTF-8, got ${topic.length}`);
    if (!(e.payload instanceof Uint8Array)) fail(`event on ${e.topic} payload`, 'must be a Uint8Array');
    eventTopics.push(topic);
    events += 6 + topic.length + e.payload.length;
  }
  const globals = GLOBAL_ENTRY_BYTES * state.globals.length;
  for (const [name, n] of [['globals', globals], ['channels', channels], ['events', events]] as const) {
    if (n > U32_MAX) fail(name, 'are too large for one section');
  }
  return { globals, tables, channels, events, channelNames, eventTopics };
}

function smallSectionsBytes(l: Layout): number {
  let n = 0;
  for (const length of [l.globals, l.channels, l.events]) if (length > 0) n += SECTION_HEADER_BYTES + length;
  for (const t of l.tables) n += SECTION_HEADER_BYTES + t;
  return n;
}

function sectionCount(state: SnapshotState, l: Layout): number {
  return [state.memory.length, l.globals, l.channels, l.events].filter((n) => n > 0).length + l.tables.length;
}

/**
 * The exact size in bytes of the snapshot that {@link encodeSnapshot} writes for `state`: the
 * `Content-Length` of the kubelet's answer.
 * @throws {RangeError} when `state` cannot be written (see {@link encodeSnapshot}).
 */
export function snapshotByteLength(state: SnapshotState): number {
  const l = layout(state);
  const memory = state.memory.length > 0 ? SECTION_HEADER_BYTES + state.memory.length : 0;
  return HEADER_BYTES + memory + smallSectionsBytes(l) + TRAILER_BYTES;
}

/**
 * Writes `state` as a K32S version 1 snapshot. The sections come in this order: MEMORY, GLOBALS,
 * one TABLE per table, CHANNELS, EVENTS; a MEMORY, GLOBALS, CHANNELS or EVENTS section that would
 * be empty is left out (a table is always written). The chunks are: the header with the MEMORY
 * section's header; the linear memory as views of `state.memory` of at most
 * `chunkBytes` each (never copied); the other sections with the trailer. The SHA-256 is computed as
 * the chunks go (or, with `opts.sha256`, taken as given: no pass over the bytes). `state.memory`
 * must not change until the last chunk has been consumed (the pod stays frozen), and a consumer that
 * keeps chunks must copy the memory views.
 *
 * `state` is checked when this function is called, before the first chunk. The generator throws an
 * `Error` if the memory's buffer is detached (the memory grew) while it runs.
 * @returns a generator of the snapshot's bytes, {@link snapshotByteLength} in all.
 * @throws {RangeError} when `state` is not writable: a digest not 32 bytes, memory length that does
 * not agree with `memoryPages`, a value out of its field's range, a duplicate global, table or
 * channel handle, a channel name of 0 or over 128 bytes, an event topic of 0 or over 65535 bytes;
 * `opts.sha256` not 32 bytes.
 * @example
 * for (const chunk of encodeSnapshot(state)) res.write(chunk);
 * @example
 * // The digest first (one hashing pass), then the bytes without hashing them again:
 * const sha256 = snapshotSha256(state);
 * for (const chunk of encodeSnapshot(state, { sha256 })) res.write(chunk);
 */
export function encodeSnapshot(state: SnapshotState, opts: EncodeOptions = {}): Generator<Uint8Array, void, undefined> {
  const chunkBytes = opts.chunkBytes ?? 1 << 20;
  if (!Number.isInteger(chunkBytes) || chunkBytes < 1) throw new RangeError(`chunkBytes must be a positive integer, got ${chunkBytes}`);
  const known = opts.sha256;
  if (known !== undefined && (!(known instanceof Uint8Array) || known.length !== TRAILER_BYTES)) throw new RangeError(`sha256 must be ${TRAILER_BYTES} bytes`);
  // The lists are taken now, so that the sizes measured here hold for the bytes written later.
  const taken: SnapshotState = {
    ...state,
    globals: state.globals.map((g) => ({ ...g })),
    tables: state.tables.map((t) => ({ ...t })),
    channels: state.channels.map((c) => ({ ...c })),
    events: state.events.map((e) => ({ ...e })),
  };
  const l = layout(taken);
  return writeChunks(taken, l, chunkBytes, known ? Uint8Array.from(known) : undefined);
}

/** Hashes what it is given, unless the digest is known already (then it is given back at the end). */
function trailerHash(known: Uint8Array | undefined): { update(b: Uint8Array): void; digest(): Uint8Array } {
  if (known) return { update: () => {}, digest: () => known };
  return createHash('sha256');
}

function* writeChunks(state: SnapshotState, l: Layout, chunkBytes: number, known: Uint8Array | undefined): Generator<Uint8Array, void, undefined> {
  const hash = trailerHash(known);
  const memory = state.memory;

  const head = new Uint8Array(HEADER_BYTES + (memory.length > 0 ? SECTION_HEADER_BYTES : 0));
  const hv = new DataView(head.buffer);
  head.set(K32S_MAGIC, 0);
  hv.setUint16(4, K32S_VERSION, true);
  hv.setUint16(6, 0, true);
  head.set(state.imageSha256, 8);
  hv.setUint32(40, memory.length, true);
  hv.setUint32(44, state.memoryPages, true);
  hv.setBigUint64(48, state.podTimeMs, true);
  hv.setBigUint64(56, state.unixTimeMs, true);
  hv.setUint32(64, sectionCount(state, l), true);
  if (memory.length > 0) {
    hv.setUint16(68, SectionType.MEMORY, true);
    hv.setUint32(70, memory.length, true);
  }
  hash.update(head);
  yield head;

  const bytes = memory.length;
  for (let at = 0; at < bytes; at += chunkBytes) {
    // A memory that grew meanwhile detaches the view (length 0): stop rather than write a short stream.
    if (memory.length !== bytes) throw new Error(`the linear memory changed size while its snapshot was written (${bytes} to ${memory.length} bytes)`);
    const view = memory.subarray(at, Math.min(at + chunkBytes, bytes));
    hash.update(view);
    yield view;
  }

  const small = smallSectionsBytes(l);
  const tail = new Uint8Array(small + TRAILER_BYTES);
  const v = new DataView(tail.buffer);
  let p = 0;
  const section = (type: number, length: number): void => {
    v.setUint16(p, type, true);
    v.setUint32(p + 2, length, true);
    p += SECTION_HEADER_BYTES;
  };
  if (l.globals > 0) section(SectionType.GLOBALS, l.globals);
  for (const g of state.globals) {
    v.setUint32(p, g.index, true);
    v.setUint8(p + 4, g.type);
    v.setBigUint64(p + 5, g.bits, true);
    p += GLOBAL_ENTRY_BYTES;
  }
  state.tables.forEach((t, i) => {
    section(SectionType.TABLE, l.tables[i]!);
    v.setUint32(p, t.index, true);
    v.setUint32(p + 4, t.entries.length, true);
    p += 8;
    // The entries are little-endian u32s; copy them as bytes on little-endian hosts.
    if (LITTLE_ENDIAN) {
      tail.set(new Uint8Array(t.entries.buffer, t.entries.byteOffset, t.entries.byteLength), p);
      p += t.entries.byteLength;
    } else {
      for (const e of t.entries) {
        v.setUint32(p, e, true);
        p += 4;
      }
    }
  });
  if (l.channels > 0) section(SectionType.CHANNELS, l.channels);
  state.channels.forEach((c, i) => {
    const name = l.channelNames[i]!;
    v.setUint32(p, c.handle, true);
    v.setUint16(p + 4, name.length, true);
    tail.set(name, p + 6);
    p += 6 + name.length;
  });
  if (l.events > 0) section(SectionType.EVENTS, l.events);
  state.events.forEach((e, i) => {
    const topic = l.eventTopics[i]!;
    v.setUint16(p, topic.length, true);
    tail.set(topic, p + 2);
    p += 2 + topic.length;
    v.setUint32(p, e.payload.length, true);
    tail.set(e.payload, p + 4);
    p += 4 + e.payload.length;
  });
  hash.update(tail.subarray(0, small));
  tail.set(hash.digest(), small);
  yield tail;
}

const LITTLE_ENDIAN = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;

/**
 * The SHA-256 of the snapshot that {@link encodeSnapshot} writes for `state` (its trailer), computed
 * in one pass without keeping the bytes: the `X-Kube32-Snapshot-Sha256` header, which goes out
 * before the body. Costs one SHA-256 over the memory.
 * @returns 32 bytes.
 * @throws {RangeError} when `state` cannot be written (see {@link encodeSnapshot}).
 */
export function snapshotSha256(state: SnapshotState): Uint8Array {
  let last: Uint8Array | undefined;
  for (const chunk of encodeSnapshot(state, { chunkBytes: Math.max(1, state.memory.length) })) last = chunk;
  return last!.slice(last!.length - TRAILER_BYTES);
}
