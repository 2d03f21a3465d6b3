/**
 * A small reader and section rewriter of the WebAssembly binary format (core spec, "Binary
 * Format", sections 1-13). It reads what the pod runtime must know of a module (types, imports,
 * functions, tables, memories, globals, exports, start) and rewrites two sections: the memory
 * section (to cap the maximum at the pod's limit) and the export section (to add exports of every
 * mutable global, table and function, so that V8's API can read and write the state by the
 * module's own indices). Every other byte is copied as it is.
 */

/** Thrown for bytes that do not parse; `loadModule` turns it into a `ModuleError`. */
export class BinaryError extends Error {
  readonly offset: number;
  constructor(message: string, offset: number) {
    super(`${message} (at byte ${offset})`);
    this.name = 'BinaryError';
    this.offset = offset;
  }
}

/** A value type byte's name. */
export function valueTypeName(t: number): string {
  switch (t) {
    case 0x7f: return 'i32';
    case 0x7e: return 'i64';
    case 0x7d: return 'f32';
    case 0x7c: return 'f64';
    case 0x7b: return 'v128';
    case 0x70: return 'funcref';
    case 0x6f: return 'externref';
    default: return `type 0x${t.toString(16)}`;
  }
}

const VALUE_TYPES = new Set([0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f]);
const REF_TYPES = new Set([0x70, 0x6f]);

/** A function type. */
export interface FuncType {
  params: number[];
  results: number[];
}

/** `(i32, i32) -> i64`, `() -> ()`. */
export function signatureText(t: FuncType): string {
  const r = t.results.length === 1 ? valueTypeName(t.results[0]!) : `(${t.results.map(valueTypeName).join(', ')})`;
  return `(${t.params.map(valueTypeName).join(', ')}) -> ${r}`;
}

export interface Limits {
  flags: number;
  min: number;
  max?: number;
}

export type ExternKind = 'function' | 'table' | 'memory' | 'global' | 'tag';
const KINDS: readonly ExternKind[] = ['function', 'table', 'memory', 'global', 'tag'];

export interface ParsedImport {
  module: string;
  name: string;
  kind: ExternKind;
  /** Function: type index. */
  typeIndex?: number;
  table?: { elementType: number; limits: Limits };
  memory?: Limits;
  global?: { type: number; mutable: boolean };
}

export interface ParsedExport {
  name: string;
  kind: ExternKind;
  index: number;
}

export interface Section {
  id: number;
  /** Offset of the section's id byte. */
  start: number;
  /** Offset of the section's contents. */
  contentStart: number;
  /** Offset just past the section. */
  end: number;
}

/** What the runtime reads of a module. */
export interface ParsedModule {
  sections: Section[];
  types: FuncType[];
  imports: ParsedImport[];
  /** Type index of each function, imported ones first (the function index space). */
  functionTypes: number[];
  importedFunctionCount: number;
  /** Each table, imported first (the table index space). */
  tables: Array<{ elementType: number; limits: Limits; imported: boolean }>;
  /** Each memory, imported first. */
  memories: Array<{ limits: Limits; imported: boolean }>;
  /** Each global, imported first (the global index space). */
  globals: Array<{ type: number; mutable: boolean; imported: boolean }>;
  exports: ParsedExport[];
  start?: number;
}

/** A cursor over a byte array with LEB128 readers. */
class Reader {
  readonly bytes: Uint8Array;
  pos: number;
  end: number;
  constructor(bytes: Uint8Array, pos = 0, end = bytes.length) {
    this.bytes = bytes;
    this.pos = pos;
    this.end = end;
  }
  byte(): number {
    if (this.pos >= this.end) throw new BinaryError('unexpected end', this.pos);
    return this.bytes[this.pos++]!;
  }
  u32(): number {
    let result = 0;
    let shift = 0;
    for (;;) {
      const b = this.byte();
      if (shift === 28 && b > 0x0f) throw new BinaryError('u32 LEB128 out of range', this.pos - 1);
      result += (b & 0x7f) * 2 ** shift;
      if ((b & 0x80) === 0) return result;
      shift += 7;
      if (shift > 28) throw new BinaryError('u32 LEB128 too long', this.pos);
    }
  }
  /** Skips a signed LEB128 of at most `bits`. */
  skipSigned(bits: number): void {
    const maxBytes = Math.ceil(bits / 7);
    for (let i = 0; i < maxBytes; i++) if ((this.byte() & 0x80) === 0) return;
    throw new BinaryError('signed LEB128 too long', this.pos);
  }
  skip(n: number): void {
    if (this.pos + n > this.end) throw new BinaryError('unexpected end', this.pos);
    this.pos += n;
  }
  name(): string {
    const len = this.u32();
    const start = this.pos;
    this.skip(len);
    try {
      return new TextDecoder('utf-8', { fatal: true }).decode(this.bytes.subarray(start, start + len));
    } catch {
      throw new BinaryError('name is not UTF-8', start);
    }
  }
  valueType(): number {
    const t = this.byte();
    if (!VALUE_TYPES.has(t)) throw new BinaryError(`unsupported value type 0x${t.toString(16)} (typed function references and GC are not supported)`, this.pos - 1);
    return t;
  }
  refType(): number {
    const t = this.byte();
    if (!REF_TYPES.has(t)) throw new BinaryError(`unsupported reference type 0x${t.toString(16)}`, this.pos - 1);
    return t;
  }
  limits(): Limits {
    const at = this.pos;
    const flags = this.byte();
    if (flags > 0x07) throw new BinaryError(`unknown limits flags 0x${flags.toString(16)}`, at);
    if (flags & 0x04) throw new BinaryError('64-bit memories are not supported', at);
    const min = this.u32();
    if (flags & 0x01) return { flags, min, max: this.u32() };
    return { flags, min };
  }
  /** Skips a constant expression up to its `end`. */
  constExpr(): void {
    for (;;) {
      const op = this.byte();
      switch (op) {
        case 0x0b: return;
        case 0x41: this.skipSigned(32); break;
        case 0x42: this.skipSigned(64); break;
        case 0x43: this.skip(4); break;
        case 0x44: this.skip(8); break;
        case 0x23: this.u32(); break; // global.get
        case 0xd0: this.byte(); break; // ref.null t
        case 0xd2: this.u32(); break; // ref.func
        case 0x6a: case 0x6b: case 0x6c: case 0x7c: case 0x7d: case 0x7e: break; // extended-const
        case 0xfd: if (this.u32() !== 12) throw new BinaryError('unsupported SIMD constant', this.pos); this.skip(16); break;
        default: throw new BinaryError(`unsupported instruction 0x${op.toString(16)} in a constant expression`, this.pos - 1);
      }
    }
  }
}

/**
 * Parses a module's sections and the parts the runtime needs.
 * @throws BinaryError when the bytes are not a WebAssembly 1.0 binary or do not parse
 */
export function parseModule(bytes: Uint8Array): ParsedModule {
  if (bytes.length < 8 || bytes[0] !== 0x00 || bytes[1] !== 0x61 || bytes[2] !== 0x73 || bytes[3] !== 0x6d) {
    throw new BinaryError('not a WebAssembly module: the magic number \\0asm is missing', 0);
  }
  const version = bytes[4]! | (bytes[5]! << 8) | (bytes[6]! << 16) | (bytes[7]! << 24);
  if (version !== 1) throw new BinaryError(`not a WebAssembly 1.0 module: binary version ${version >>> 0}`, 4);
  const m: ParsedModule = {
    sections: [], types: [], imports: [], functionTypes: [], importedFunctionCount: 0,
    tables: [], memories: [], globals: [], exports: [],
  };
  const r = new Reader(bytes, 8);
  while (r.pos < bytes.length) {
    const start = r.pos;
    const id = r.byte();
    const size = r.u32();
    const contentStart = r.pos;
    const end = contentStart + size;
    if (end > bytes.length) throw new BinaryError(`section ${id} runs past the end of the module`, start);
    m.sections.push({ id, start, contentStart, end });
    const s = new Reader(bytes, contentStart, end);
    switch (id) {
      case 1: readTypes(s, m); break;
      case 2: readImports(s, m); break;
      case 3: for (let n = s.u32(); n > 0; n--) m.functionTypes.push(s.u32()); break;
      case 4: for (let n = s.u32(); n > 0; n--) {
        if (bytes[s.pos] === 0x40) throw new BinaryError('tables with initialisers are not supported', s.pos);
        m.tables.push({ elementType: s.refType(), limits: s.limits(), imported: false });
      } break;
      case 5: for (let n = s.u32(); n > 0; n--) m.memories.push({ limits: s.limits(), imported: false }); break;
      case 6: for (let n = s.u32(); n > 0; n--) {
        const type = s.valueType();
        const mut = s.byte();
        if (mut > 1) throw new BinaryError(`bad global mutability ${mut}`, s.pos - 1);
        s.constExpr();
        m.globals.push({ type, mutable: mut === 1, imported: false });
      } break;
      case 7: for (let n = s.u32(); n > 0; n--) {
        const name = s.name();
        const k = s.byte();
        const kind = KINDS[k];
        if (!kind) throw new BinaryError(`unknown export kind ${k}`, s.pos - 1);
        m.exports.push({ name, kind, index: s.u32() });
      } break;
      case 8: m.start = s.u32(); break;
      default: s.pos = end; // custom, element, code, data, data count, tag: copied as they are
    }
    if (id >= 1 && id <= 8 && s.pos !== end) throw new BinaryError(`section ${id} has ${end - s.pos} bytes after its contents`, s.pos);
    r.pos = end;
  }
  return m;
}

function readTypes(s: Reader, m: ParsedModule): void {
  for (let n = s.u32(); n > 0; n--) {
    const form = s.byte();
    if (form !== 0x60) throw new BinaryError(`unsupported type form 0x${form.toString(16)} (GC types are not supported)`, s.pos - 1);
    const params: number[] = [];
    for (let p = s.u32(); p > 0; p--) params.push(s.valueType());
    const results: number[] = [];
    for (let p = s.u32(); p > 0; p--) results.push(s.valueType());
    m.types.push({ params, results });
  }
}

function readImports(s: Reader, m: ParsedModule): void {
  for (let n = s.u32(); n > 0; n--) {
    const module = s.name();
    const name = s.name();
    const k = s.byte();
    const kind = KINDS[k];
    if (!kind) throw new BinaryError(`unknown import kind ${k}`, s.pos - 1);
    const imp: ParsedImport = { module, name, kind };
    switch (kind) {
      case 'function': imp.typeIndex = s.u32(); m.functionTypes.push(imp.typeIndex); m.importedFunctionCount++; break;
      case 'table': imp.table = { elementType: s.refType(), limits: s.limits() }; m.tables.push({ ...imp.table, imported: true }); break;
      case 'memory': imp.memory = s.limits(); m.memories.push({ limits: imp.memory, imported: true }); break;
      case 'global': {
        const type = s.valueType();
        const mutable = s.byte() === 1;
        imp.global = { type, mutable };
        m.globals.push({ type, mutable, imported: true });
        break;
      }
      case 'tag': s.byte(); s.u32(); break;
    }
    m.imports.push(imp);
  }
}

/** Appends an unsigned LEB128. */
export function writeU32(out: number[], v: number): void {
  do {
    let b = v & 0x7f;
    v = Math.floor(v / 128);
    if (v !== 0) b |= 0x80;
    out.push(b);
  } while (v !== 0);
}

function writeName(out: number[], name: string): void {
  const b = new TextEncoder().encode(name);
  writeU32(out, b.length);
  for (const x of b) out.push(x);
}

/** The canonical order of sections by id (the tag section 13 sits between memory and global). */
const SECTION_ORDER = [1, 2, 3, 4, 5, 13, 6, 7, 8, 9, 12, 10, 11];

/** A function the rewriter appends: its type and its body (locals and code, without the size prefix). */
export interface AddedFunction {
  /** Index into the module's types followed by `Rewrite.addTypes`. */
  typeIndex: number;
  body: Uint8Array;
}

/** What to change in a module. */
export interface Rewrite {
  /** New maximum of memory 0 (a defined memory), in pages; the flags gain "has maximum". */
  memoryMaxPages?: number;
  /** New maximum of every defined table, in entries (the lower of it and the declared one); the flags gain "has maximum". */
  tableMaxEntries?: number;
  /** Function types to append to the type section (their indices follow the module's own). */
  addTypes?: FuncType[];
  /**
   * Functions to append (their indices follow every existing function, so no index of the
   * original module changes).
   */
  addFunctions?: AddedFunction[];
  /** Exports to append to the export section. */
  addExports: ParsedExport[];
}

/** The bytes of a vector section's entries after its count, and the count. */
function vectorTail(bytes: Uint8Array, sec: Section): { count: number; tail: Uint8Array } {
  const r = new Reader(bytes, sec.contentStart, sec.end);
  const count = r.u32();
  return { count, tail: bytes.subarray(r.pos, sec.end) };
}

function concat(parts: Uint8Array[]): Uint8Array {
  let len = 0;
  for (const p of parts) len += p.length;
  const out = new Uint8Array(len);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** A vector section's body: the new count, the old entries, the new entries. */
function vectorBody(bytes: Uint8Array, sec: Section | undefined, added: number, entries: number[]): Uint8Array {
  const old = sec ? vectorTail(bytes, sec) : { count: 0, tail: new Uint8Array(0) };
  const head: number[] = [];
  writeU32(head, old.count + added);
  return concat([Uint8Array.from(head), old.tail, Uint8Array.from(entries)]);
}

/**
 * Rewrites a module: caps memory 0's maximum and the tables' maximum, appends types, functions and exports. Every other
 * section is copied as it is; sections that must be added go to their place in the canonical order.
 */
export function rewriteModule(bytes: Uint8Array, m: ParsedModule, rw: Rewrite): Uint8Array {
  const addTypes = rw.addTypes ?? [];
  const addFunctions = rw.addFunctions ?? [];
  const find = (id: number): Section | undefined => m.sections.find((x) => x.id === id);
  const bodies = new Map<number, () => Uint8Array>();
  if (addTypes.length > 0) {
    bodies.set(1, () => {
      const e: number[] = [];
      for (const t of addTypes) {
        e.push(0x60);
        writeU32(e, t.params.length);
        e.push(...t.params);
        writeU32(e, t.results.length);
        e.push(...t.results);
      }
      return vectorBody(bytes, find(1), addTypes.length, e);
    });
  }
  if (addFunctions.length > 0) {
    bodies.set(3, () => {
      const e: number[] = [];
      for (const f of addFunctions) writeU32(e, f.typeIndex);
      return vectorBody(bytes, find(3), addFunctions.length, e);
    });
    bodies.set(10, () => {
      const e: number[] = [];
      for (const f of addFunctions) {
        writeU32(e, f.body.length);
        for (const b of f.body) e.push(b);
      }
      return vectorBody(bytes, find(10), addFunctions.length, e);
    });
  }
  bodies.set(7, () => {
    const out: number[] = [];
    writeU32(out, m.exports.length + rw.addExports.length);
    for (const e of [...m.exports, ...rw.addExports]) {
      writeName(out, e.name);
      out.push(KINDS.indexOf(e.kind));
      writeU32(out, e.index);
    }
    return Uint8Array.from(out);
  });
  if (rw.memoryMaxPages !== undefined) {
    const cap = rw.memoryMaxPages;
    bodies.set(5, () => {
      const out: number[] = [];
      const defined = m.memories.filter((x) => !x.imported);
      writeU32(out, defined.length);
      defined.forEach((mem, i) => {
        const l = mem.limits;
        if (i === 0) {
          const max = l.max === undefined ? cap : Math.min(l.max, cap);
          out.push(l.flags | 0x01);
          writeU32(out, l.min);
          writeU32(out, Math.max(max, l.min));
        } else {
          out.push(l.flags);
          writeU32(out, l.min);
          if (l.max !== undefined) writeU32(out, l.max);
        }
      });
      return Uint8Array.from(out);
    });
  }
  if (rw.tableMaxEntries !== undefined && find(4)) {
    const cap = rw.tableMaxEntries;
    bodies.set(4, () => {
      const out: number[] = [];
      const defined = m.tables.filter((x) => !x.imported);
      writeU32(out, defined.length);
      for (const t of defined) {
        const l = t.limits;
        out.push(t.elementType, l.flags | 0x01);
        writeU32(out, l.min);
        writeU32(out, Math.max(l.min, l.max === undefined ? cap : Math.min(l.max, cap)));
      }
      return Uint8Array.from(out);
    });
  }
  const parts: Uint8Array[] = [bytes.subarray(0, 8)];
  const section = (id: number, body: Uint8Array): void => {
    const head: number[] = [id];
    writeU32(head, body.length);
    parts.push(Uint8Array.from(head), body);
  };
  const rank = (id: number): number => SECTION_ORDER.indexOf(id);
  // Sections to write that the module lacks, in canonical order, written before the first later one.
  const missing = [...bodies.keys()].filter((id) => !find(id) && id !== 5).sort((a, b) => rank(a) - rank(b));
  for (const s of m.sections) {
    while (s.id !== 0 && missing.length > 0 && rank(missing[0]!) < rank(s.id)) {
      const id = missing.shift()!;
      section(id, bodies.get(id)!());
    }
    const body = bodies.get(s.id);
    if (body) section(s.id, body());
    else parts.push(bytes.subarray(s.start, s.end));
  }
  for (const id of missing) section(id, bodies.get(id)!());
  return concat(parts);
}
