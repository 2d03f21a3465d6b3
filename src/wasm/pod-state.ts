/**
 * Reading and writing a pod's state inside its thread, for a K32S snapshot or restore (seed, "What
 * moves", "Snapshot format"): mutable globals (f32 and f64 by their bits), tables as function
 * indices, the memory as a view of the live memory. Memory never leaves the thread whole: a
 * snapshot goes out in bounded chunks (copied once each and transferred), a restore comes in the
 * same way and is written straight into the instance's memory by the K32S reader.
 */
import { encodeSnapshot, K32SError, NULL_FUNCREF, SnapshotDecoder, snapshotByteLength, snapshotSha256, type SnapshotGlobal, type SnapshotState, type SnapshotTable, type ValType } from '../k32s/index.ts';
import { INSTR, PAGE } from './abi.ts';
import type { WorkerInit } from './protocol.ts';
import type { WasmGlobal, WasmInstance, WasmMemory, WasmTable } from './wasm-api.ts';

/** A held or restored event. */
export interface TopicEvent {
  topic: string;
  payload: Uint8Array;
}

/** The state of one instantiated pod that a snapshot reads and a restore writes. */
export class PodStateIO {
  readonly #init: WorkerInit;
  readonly #instance: WasmInstance;
  readonly #memory: WasmMemory | undefined;
  /** Function identities to indices, built at the first snapshot that needs it. */
  #funcIndex: Map<unknown, number> | undefined;

  constructor(init: WorkerInit, instance: WasmInstance, memory: WasmMemory | undefined) {
    this.#init = init;
    this.#instance = instance;
    this.#memory = memory;
  }

  #ex<T>(name: string): T | undefined {
    return this.#instance.exports[name] as T | undefined;
  }

  /** Bytes of memory a snapshot carries (the limit below one page, seed "Snapshot format"). */
  stateBytes(): { bytes: number; pages: number } {
    const memory = this.#memory;
    if (!memory) return { bytes: 0, pages: 0 };
    const pages = memory.buffer.byteLength / PAGE;
    if (this.#init.subPageLimit && pages <= 1) return { bytes: Math.min(this.#init.memoryLimitBytes, pages * PAGE), pages };
    return { bytes: pages * PAGE, pages };
  }

  #functionIndex(f: unknown): number {
    if (f === null || f === undefined) return NULL_FUNCREF;
    if (!this.#funcIndex) {
      this.#funcIndex = new Map();
      for (let i = 0; i < this.#init.functionCount; i++) this.#funcIndex.set(this.#ex(INSTR.func(i)), i);
    }
    const i = this.#funcIndex.get(f);
    if (i === undefined) throw new Error('a table entry or funcref global holds a function that is not one of the module\'s own');
    return i;
  }

  #funcRef(index: number, where: string): unknown {
    if (index === NULL_FUNCREF) return null;
    const f = this.#ex(INSTR.func(index));
    if (!f) throw new K32SError('TableMismatch', `${where} names function ${index}; the module has ${this.#init.functionCount}`, 0);
    return f;
  }

  /** Every mutable global, by index, as its bits. */
  readGlobals(): SnapshotGlobal[] {
    return this.#init.globalTypes.map(([index, type]) => {
      const v = type === 0x7d || type === 0x7c ? undefined : this.#ex<WasmGlobal>(INSTR.global(index))!.value;
      let bits: bigint;
      switch (type) {
        case 0x7f: bits = BigInt((v as number) >>> 0); break;
        case 0x7e: bits = BigInt.asUintN(64, v as bigint); break;
        case 0x7d: bits = BigInt(this.#ex<() => number>(INSTR.getBits(index))!() >>> 0); break;
        case 0x7c: bits = BigInt.asUintN(64, this.#ex<() => bigint>(INSTR.getBits(index))!()); break;
        case 0x70: bits = BigInt(this.#functionIndex(v)); break;
        default: throw new Error(`global ${index} has a type a snapshot cannot carry`);
      }
      return { index, type: type as ValType, bits };
    });
  }

  /** @throws K32SError `GlobalMismatch` for a global the module does not have */
  writeGlobals(globals: SnapshotGlobal[]): void {
    for (const g of globals) {
      const glob = this.#ex<WasmGlobal>(INSTR.global(g.index));
      if (!glob) throw new K32SError('GlobalMismatch', `the snapshot holds global ${g.index}, which is not a mutable global of the module`, 0);
      switch (g.type) {
        case 0x7f: glob.value = Number(BigInt.asIntN(32, g.bits)); break;
        case 0x7e: glob.value = BigInt.asIntN(64, g.bits); break;
        case 0x7d: this.#ex<(b: number) => void>(INSTR.setBits(g.index))!(Number(g.bits) | 0); break;
        case 0x7c: this.#ex<(b: bigint) => void>(INSTR.setBits(g.index))!(BigInt.asIntN(64, g.bits)); break;
        case 0x70: glob.value = this.#funcRef(Number(g.bits), `global ${g.index}`); break;
      }
    }
  }

  /** Every table, as function indices. */
  readTables(): SnapshotTable[] {
    return this.#init.tableIndices.map((index) => {
      const t = this.#ex<WasmTable>(INSTR.table(index))!;
      const entries = new Uint32Array(t.length);
      for (let i = 0; i < entries.length; i++) entries[i] = this.#functionIndex(t.get(i));
      return { index, entries };
    });
  }

  /** @throws K32SError `TableMismatch` for a table the module lacks, a shorter one, or one that cannot grow */
  writeTables(tables: SnapshotTable[]): void {
    for (const s of tables) {
      const t = this.#ex<WasmTable>(INSTR.table(s.index));
      if (!t) throw new K32SError('TableMismatch', `the snapshot holds table ${s.index}, which the module does not have`, 0);
      if (t.length > s.entries.length) throw new K32SError('TableMismatch', `table ${s.index} has ${s.entries.length} entries in the snapshot, fewer than the module's ${t.length}`, 0);
      try {
        if (t.length < s.entries.length) t.grow(s.entries.length - t.length, null);
      } catch {
        throw new K32SError('TableMismatch', `table ${s.index} cannot grow to the snapshot's ${s.entries.length} entries`, 0);
      }
      for (let i = 0; i < s.entries.length; i++) t.set(i, this.#funcRef(s.entries[i]!, `table ${s.index} entry ${i}`));
    }
  }

  /**
   * A K32S reader that writes the MEMORY section straight into the instance's memory (grown to the
   * snapshot's page count first); push the chunks, then `end()` and {@link applyRestored}.
   */
  restoreDecoder(): SnapshotDecoder {
    const init = this.#init;
    const memory = this.#memory;
    return new SnapshotDecoder({
      expectedImageSha256: init.imageSha256,
      memoryLimitBytes: init.subPageLimit ? init.memoryLimitBytes : init.memoryPagesLimit * PAGE,
      module: init.k32sShape,
      memory: (header) => {
        if (!memory) {
          if (header.memoryBytes !== 0) throw new K32SError('MemoryLimit', `the snapshot holds ${header.memoryBytes} bytes of linear memory; the module has no memory`, 40);
          return new Uint8Array(0);
        }
        const have = memory.buffer.byteLength / PAGE;
        if (header.memoryPages < have) {
          throw new K32SError('MemoryLimit', `the snapshot holds ${header.memoryPages} memory pages, fewer than the module's initial ${have}`, 44);
        }
        if (header.memoryPages > have) memory.grow(header.memoryPages - have);
        return new Uint8Array(memory.buffer);
      },
    });
  }

  /** After a restore's last chunk: zeroes memory past the snapshot's bytes, writes globals and tables back. */
  applyRestored(snap: ReturnType<SnapshotDecoder['end']>): void {
    const memory = this.#memory;
    // A module's memory may hold more than the snapshot's memory bytes (a sub-page limit): zero the rest.
    if (memory && snap.header.memoryBytes < memory.buffer.byteLength) new Uint8Array(memory.buffer).fill(0, snap.header.memoryBytes);
    this.writeGlobals(snap.globals);
    this.writeTables(snap.tables);
  }

  /** The state a snapshot writes, memory as a view of the live memory. */
  snapshotState(at: { podTimeMs: number; unixTimeMs: number }, channels: Array<{ handle: number; name: string }>, events: TopicEvent[]): SnapshotState {
    const { bytes, pages } = this.stateBytes();
    return {
      imageSha256: this.#init.imageSha256,
      memory: this.#memory ? new Uint8Array(this.#memory.buffer, 0, bytes) : new Uint8Array(0),
      memoryPages: pages,
      podTimeMs: BigInt(at.podTimeMs),
      unixTimeMs: BigInt(at.unixTimeMs),
      globals: this.readGlobals(),
      tables: this.readTables(),
      channels,
      events,
    };
  }
}

/** A snapshot stream of one context: chunks go out while the main thread grants credit. */
export interface SnapshotStream {
  gen: Generator<Uint8Array, void, undefined>;
  credit: number;
  /** The held events it writes (a later snapshot of the same freeze with the same events has the same bytes). */
  events: TopicEvent[];
  /** The last 32 bytes of the last chunk sent that was not a view of memory: the trailer, once the stream ends. */
  trailer?: Uint8Array;
}

/** A snapshot's SHA-256 known for a freeze, and the held events it was computed with. */
export interface KnownDigest {
  events: TopicEvent[];
  sha256: Uint8Array;
}

/** True when two lists of held events are the same (topics and payload bytes, in order). */
export function sameEvents(a: TopicEvent[], b: TopicEvent[]): boolean {
  return a.length === b.length && a.every((e, i) => e.topic === b[i]!.topic && Buffer.compare(e.payload, b[i]!.payload) === 0);
}

/**
 * Begins a snapshot: its length, its digest, and its stream. The digest is `known` when a snapshot of
 * the same freeze and events has been hashed before; else, with `digest`, it is computed now by one
 * hashing pass over memory (no copy). Either way the stream then writes the bytes without hashing
 * them again (the frozen pod's state does not change); without a digest, the stream hashes as it
 * goes, as the K32S writer does.
 */
export function beginSnapshot(
  state: SnapshotState,
  opts: { digest: boolean; chunkBytes: number; known?: Uint8Array },
): { byteLength: number; snapshotSha256?: Uint8Array; stream: SnapshotStream } {
  const byteLength = snapshotByteLength(state);
  const sha256 = opts.known ?? (opts.digest ? snapshotSha256(state) : undefined);
  const gen = encodeSnapshot(state, { chunkBytes: opts.chunkBytes, ...(sha256 ? { sha256 } : {}) });
  return { byteLength, ...(sha256 ? { snapshotSha256: sha256 } : {}), stream: { gen, credit: 0, events: state.events } };
}
