/**
 * The K32S sections other than MEMORY, read from a complete buffer: GLOBALS, TABLE, CHANNELS and
 * EVENTS (seed 002, "Snapshot format"), each checked against the layout and, when given, the module.
 */
import { K32SError } from './errors.ts';
import { NULL_FUNCREF, SECTION_HEADER_BYTES, type HeldEvent, type ModuleShape, type SectionName, type SnapshotChannel, type SnapshotGlobal, type SnapshotTable, type ValType } from './types.ts';

/** Bytes of one GLOBALS entry: `u32` index, `u8` value type, `u64` bits. */
export const GLOBAL_ENTRY_BYTES = 13;
const VAL_TYPE_NAMES: Record<number, string> = { 127: 'i32', 126: 'i64', 125: 'f32', 124: 'f64', 112: 'funcref' }; // 0x7F 0x7E 0x7D 0x7C 0x70
const SECTION_NAMES: Record<number, SectionName> = { 1: 'MEMORY', 2: 'GLOBALS', 3: 'TABLE', 4: 'CHANNELS', 5: 'EVENTS' };
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const LITTLE_ENDIAN = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;

/** The name of a section type: `MEMORY`, `GLOBALS`, `TABLE`, `CHANNELS`, `EVENTS`, or `UNKNOWN`. */
export function sectionName(type: number): SectionName {
  return SECTION_NAMES[type] ?? 'UNKNOWN';
}

/** The name of a value type (`i32`, `i64`, `f32`, `f64`, `funcref`), or its hex byte when unknown. */
export function valTypeName(type: number): string {
  return VAL_TYPE_NAMES[type] ?? `0x${type.toString(16).padStart(2, '0')}`;
}

function fail(code: 'Malformed' | 'GlobalMismatch' | 'TableMismatch', message: string, offset: number): never {
  throw new K32SError(code, message, offset);
}

/** Reads the fields of one buffered section, refusing reads past its end. */
export class Cursor {
  readonly buf: Uint8Array;
  readonly view: DataView;
  readonly base: number;
  readonly name: string;
  p = 0;
  constructor(buf: Uint8Array, base: number, name: string) {
    this.buf = buf;
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    this.base = base;
    this.name = name;
  }
  get left(): number {
    return this.buf.length - this.p;
  }
  get offset(): number {
    return this.base + this.p;
  }
  need(n: number, what: string): void {
    if (this.left < n) {
      throw new K32SError('Malformed', `the ${this.name} section ends inside ${what} (${this.left} of ${n} bytes left)`, this.offset);
    }
  }
  u8(what: string): number {
    this.need(1, what);
    return this.view.getUint8(this.p++);
  }
  u16(what: string): number {
    this.need(2, what);
    const v = this.view.getUint16(this.p, true);
    this.p += 2;
    return v;
  }
  u32(what: string): number {
    this.need(4, what);
    const v = this.view.getUint32(this.p, true);
    this.p += 4;
    return v;
  }
  u64(what: string): bigint {
    this.need(8, what);
    const v = this.view.getBigUint64(this.p, true);
    this.p += 8;
    return v;
  }
  bytes(n: number, what: string): Uint8Array {
    this.need(n, what);
    const b = this.buf.subarray(this.p, this.p + n);
    this.p += n;
    return b;
  }
  text(n: number, what: string): string {
    const at = this.offset;
    const b = this.bytes(n, what);
    try {
      return utf8.decode(b);
    } catch {
      throw new K32SError('Malformed', `${what} in the ${this.name} section is not valid UTF-8`, at);
    }
  }
}

/**
 * Reads a GLOBALS section into `out`.
 * @throws {K32SError} `Malformed` for a bad entry, `GlobalMismatch` for one the module does not have.
 */
export function readGlobals(c: Cursor, module: ModuleShape | undefined, out: SnapshotGlobal[]): void {
  const seen = new Set<number>();
  while (c.left > 0) {
    const at = c.offset;
    const index = c.u32('a global index');
    const type = c.u8('a value type');
    const bits = c.u64('a global value');
    if (VAL_TYPE_NAMES[type] === undefined) {
      fail('Malformed', `global ${index} has value type 0x${type.toString(16)}, which K32S does not define (0x7F, 0x7E, 0x7D, 0x7C, 0x70)`, at + 4);
    }
    if (seen.has(index)) fail('Malformed', `the GLOBALS section lists global ${index} twice`, at);
    seen.add(index);
    if (type !== 0x7e && type !== 0x7c && bits > 0xffffffffn) {
      fail('Malformed', `global ${index} is ${valTypeName(type)} but its value 0x${bits.toString(16)} has bits above the low 32`, at + 5);
    }
    if (module) {
      const want = module.globals.get(index);
      if (want === undefined) {
        fail('GlobalMismatch', `the snapshot holds global ${index}, which is not a mutable global of the module`, at);
      }
      if (want !== type) {
        fail('GlobalMismatch', `global ${index} is ${valTypeName(type)} in the snapshot but ${valTypeName(want)} in the module`, at + 4);
      }
      const fns = module.functionCount;
      if (type === 0x70 && fns !== undefined && bits !== BigInt(NULL_FUNCREF) && bits >= BigInt(fns)) {
        fail('GlobalMismatch', `funcref global ${index} names function ${bits}; the module has ${fns} functions`, at + 5);
      }
    }
    out.push({ index, type: type as ValType, bits });
  }
}

/**
 * Reads a TABLE section into `tables`; `seen` holds the table indices read so far.
 * @throws {K32SError} `Malformed` for a bad layout or a repeated table, `TableMismatch` for one the module does not take.
 */
export function readTable(c: Cursor, module: ModuleShape | undefined, tables: SnapshotTable[], seen: Set<number>): void {
  const at = c.offset - SECTION_HEADER_BYTES;
  const index = c.u32('the table index');
  const size = c.u32('the table size');
  if (size * 4 !== c.left) {
    fail('Malformed', `table ${index} says ${size} entries but its section holds ${c.left / 4}`, at + SECTION_HEADER_BYTES + 4);
  }
  if (seen.has(index)) fail('Malformed', `the snapshot has table ${index} twice`, at);
  seen.add(index);
  const entries = new Uint32Array(size);
  const raw = c.bytes(size * 4, 'the table entries');
  if (LITTLE_ENDIAN) {
    new Uint8Array(entries.buffer).set(raw);
  } else {
    for (let k = 0; k < size; k++) entries[k] = c.view.getUint32(8 + 4 * k, true);
  }
  if (module) {
    const limits = module.tables.get(index);
    if (limits === undefined) fail('TableMismatch', `the snapshot holds table ${index}; the module has no table ${index}`, at);
    if (size < limits.min || (limits.max !== undefined && size > limits.max)) {
      const range = limits.max === undefined ? `${limits.min} or more` : `${limits.min} to ${limits.max}`;
      fail('TableMismatch', `table ${index} has ${size} entries in the snapshot; the module's table ${index} takes ${range}`, at);
    }
    const fns = module.functionCount;
    if (fns !== undefined) {
      for (let k = 0; k < size; k++) {
        const e = entries[k]!;
        if (e >= fns && e !== NULL_FUNCREF) {
          fail('TableMismatch', `entry ${k} of table ${index} names function ${e}; the module has ${fns} functions`, at + 14 + 4 * k);
        }
      }
    }
  }
  tables.push({ index, entries });
}

/**
 * Reads a CHANNELS section into `out`.
 * @throws {K32SError} `Malformed` for a bad entry, a handle 0, a repeated handle or name.
 */
export function readChannels(c: Cursor, out: SnapshotChannel[]): void {
  const handles = new Set<number>();
  const names = new Set<string>();
  while (c.left > 0) {
    const at = c.offset;
    const handle = c.u32('a channel handle');
    const n = c.u16('a channel name length');
    if (handle === 0) fail('Malformed', 'a channel has handle 0; handles start at 1', at);
    if (n === 0 || n > 128) fail('Malformed', `channel ${handle} has a name of ${n} bytes; names have 1 to 128`, at + 4);
    const name = c.text(n, `the name of channel ${handle}`);
    if (handles.has(handle)) fail('Malformed', `the CHANNELS section lists handle ${handle} twice`, at);
    if (names.has(name)) fail('Malformed', `the CHANNELS section lists the channel ${JSON.stringify(name)} twice`, at);
    handles.add(handle);
    names.add(name);
    out.push({ handle, name });
  }
}

/**
 * Reads an EVENTS section into `out`; payloads are views of the section's buffer.
 * @throws {K32SError} `Malformed` for a bad entry or an empty topic.
 */
export function readEvents(c: Cursor, out: HeldEvent[]): void {
  while (c.left > 0) {
    const at = c.offset;
    const n = c.u16('an event topic length');
    if (n === 0) fail('Malformed', 'a held event has an empty topic', at);
    const topic = c.text(n, 'an event topic');
    const m = c.u32('an event payload length');
    const payload = c.bytes(m, `the payload of an event on ${JSON.stringify(topic)}`);
    out.push({ topic, payload });
  }
}

/**
 * Checks, once every section is read, that every mutable global and table of the module is in it.
 * @throws {K32SError} `GlobalMismatch` or `TableMismatch` naming the first one missing.
 */
export function checkModuleComplete(module: ModuleShape, globals: SnapshotGlobal[], tables: SnapshotTable[], offset: number): void {
  const seenGlobals = new Set(globals.map((g) => g.index));
  for (const [index, type] of module.globals) {
    if (!seenGlobals.has(index)) fail('GlobalMismatch', `the module's mutable global ${index} (${valTypeName(type)}) is not in the snapshot`, offset);
  }
  const seenTables = new Set(tables.map((t) => t.index));
  for (const index of module.tables.keys()) {
    if (!seenTables.has(index)) fail('TableMismatch', `the module's table ${index} is not in the snapshot`, offset);
  }
}
