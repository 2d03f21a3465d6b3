/**
 * A pod's worker thread: instantiates the instrumented module with the `k32` imports, runs the
 * calls the main thread sends one at a time, and reads and writes the module's state for a K32S
 * snapshot or restore (seed, "What moves", "Snapshot format"). Memory never leaves this thread
 * whole: a snapshot goes out in bounded chunks (copied once each and transferred), a restore comes
 * in the same way and is written straight into the instance's memory by the K32S reader.
 */
import { parentPort } from 'node:worker_threads';
import { encodeSnapshot, K32SError, NULL_FUNCREF, SnapshotDecoder, snapshotByteLength, type SnapshotGlobal, type SnapshotState, type SnapshotTable, type ValType } from '../k32s/index.ts';
import { INSTR, PAGE } from './abi.ts';
import { HostState, makeImports, PodClock } from './host.ts';
import type { FromWorker, ToWorker, WorkerInit } from './protocol.ts';
import { WA, type WasmGlobal, type WasmInstance, type WasmMemory, type WasmTable } from './wasm-api.ts';

const port = parentPort!;
const post = (m: FromWorker, transfer: ArrayBuffer[] = []): void => port.postMessage(m, transfer);

// The first message is the pod's `init` (see worker-pool.ts: the worker boots before its pod exists).
let init: WorkerInit;
const clock = new PodClock();
const host = new HostState();
let imports: ReturnType<typeof makeImports>;
let instance: WasmInstance | undefined;
let memory: WasmMemory | undefined;
/** Pod time and Unix time recorded at the freeze, so that the same frozen pod gives the same bytes. */
let frozenAt: { podTimeMs: number; unixTimeMs: number } | undefined;
let dead = false;

function setup(i: WorkerInit): void {
  init = i;
  // The worker may have waited in the pool since the node booted: the pod's clock starts now.
  clock.reset(0);
  imports = makeImports(
    {
      env: init.env,
      assets: init.assets,
      ...(init.fsDir ? { fsDir: init.fsDir } : {}),
      ...(init.fsLimitBytes !== undefined ? { fsLimitBytes: init.fsLimitBytes } : {}),
      clock,
      memory: () => memory,
      log: (line) => post({ op: 'log', line }),
      send: (topic, payload) => post({ op: 'send', topic, payload }, [payload.buffer as ArrayBuffer]),
    },
    host,
  );
}

function ex<T>(name: string): T | undefined {
  return instance!.exports[name] as T | undefined;
}

function trapMessage(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

/** Bytes of memory a snapshot carries (the limit below one page, seed "Snapshot format"). */
function stateBytes(): { bytes: number; pages: number } {
  if (!memory) return { bytes: 0, pages: 0 };
  const pages = memory.buffer.byteLength / PAGE;
  if (init.subPageLimit && pages <= 1) return { bytes: Math.min(init.memoryLimitBytes, pages * PAGE), pages };
  return { bytes: pages * PAGE, pages };
}

let funcIndex: Map<unknown, number> | undefined;
function functionIndex(f: unknown): number {
  if (f === null || f === undefined) return NULL_FUNCREF;
  if (!funcIndex) {
    funcIndex = new Map();
    for (let i = 0; i < init.functionCount; i++) funcIndex.set(ex(INSTR.func(i)), i);
  }
  const i = funcIndex.get(f);
  if (i === undefined) throw new Error('a table entry or funcref global holds a function that is not one of the module\'s own');
  return i;
}

function readGlobals(): SnapshotGlobal[] {
  return init.globalTypes.map(([index, type]) => {
    const v = type === 0x7d || type === 0x7c ? undefined : ex<WasmGlobal>(INSTR.global(index))!.value;
    let bits: bigint;
    switch (type) {
      case 0x7f: bits = BigInt((v as number) >>> 0); break;
      case 0x7e: bits = BigInt.asUintN(64, v as bigint); break;
      case 0x7d: bits = BigInt(ex<() => number>(INSTR.getBits(index))!() >>> 0); break;
      case 0x7c: bits = BigInt.asUintN(64, ex<() => bigint>(INSTR.getBits(index))!()); break;
      case 0x70: bits = BigInt(functionIndex(v)); break;
      default: throw new Error(`global ${index} has a type a snapshot cannot carry`);
    }
    return { index, type: type as ValType, bits };
  });
}

function writeGlobals(globals: SnapshotGlobal[]): void {
  for (const g of globals) {
    const glob = ex<WasmGlobal>(INSTR.global(g.index));
    if (!glob) throw new K32SError('GlobalMismatch', `the snapshot holds global ${g.index}, which is not a mutable global of the module`, 0);
    switch (g.type) {
      case 0x7f: glob.value = Number(BigInt.asIntN(32, g.bits)); break;
      case 0x7e: glob.value = BigInt.asIntN(64, g.bits); break;
      case 0x7d: ex<(b: number) => void>(INSTR.setBits(g.index))!(Number(g.bits) | 0); break;
      case 0x7c: ex<(b: bigint) => void>(INSTR.setBits(g.index))!(BigInt.asIntN(64, g.bits)); break;
      case 0x70: glob.value = funcRef(Number(g.bits), `global ${g.index}`); break;
    }
  }
}

function funcRef(index: number, where: string): unknown {
  if (index === NULL_FUNCREF) return null;
  const f = ex(INSTR.func(index));
  if (!f) throw new K32SError('TableMismatch', `${where} names function ${index}; the module has ${init.functionCount}`, 0);
  return f;
}

function readTables(): SnapshotTable[] {
  return init.tableIndices.map((index) => {
    const t = ex<WasmTable>(INSTR.table(index))!;
    const entries = new Uint32Array(t.length);
    for (let i = 0; i < entries.length; i++) entries[i] = functionIndex(t.get(i));
    return { index, entries };
  });
}

function writeTables(tables: SnapshotTable[]): void {
  for (const s of tables) {
    const t = ex<WasmTable>(INSTR.table(s.index));
    if (!t) throw new K32SError('TableMismatch', `the snapshot holds table ${s.index}, which the module does not have`, 0);
    if (t.length > s.entries.length) throw new K32SError('TableMismatch', `table ${s.index} has ${s.entries.length} entries in the snapshot, fewer than the module's ${t.length}`, 0);
    try {
      if (t.length < s.entries.length) t.grow(s.entries.length - t.length, null);
    } catch {
      throw new K32SError('TableMismatch', `table ${s.index} cannot grow to the snapshot's ${s.entries.length} entries`, 0);
    }
    for (let i = 0; i < s.entries.length; i++) t.set(i, funcRef(s.entries[i]!, `table ${s.index} entry ${i}`));
  }
}

/**
 * Instantiates the compiled module, synchronously: a restore's first chunks may already be queued
 * on the port, and its listener must be in place before the next message is dispatched.
 */
function instantiate(): void {
  instance = new WA.Instance(init.compiled, { k32: imports });
  memory = ex<WasmMemory>(INSTR.memory);
}

/** Receives the snapshot's chunks from the main thread and feeds the K32S reader. */
function restore(): Promise<{ podTimeMs: number; events: Array<{ topic: string; payload: Uint8Array }> }> {
  const decoder = new SnapshotDecoder({
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
  return new Promise((resolve, reject) => {
    const onMessage = (m: ToWorker): void => {
      try {
        if (m.op === 'restoreChunk') {
          decoder.push(m.chunk);
          post({ op: 'restoreAck' });
        } else if (m.op === 'restoreAbort') {
          throw new Error(m.message);
        } else if (m.op === 'restoreEnd') {
          port.off('message', onMessage);
          const snap = decoder.end();
          // A module's memory may hold more than the snapshot's memory bytes (a sub-page limit): zero the rest.
          if (memory && snap.header.memoryBytes < memory.buffer.byteLength) new Uint8Array(memory.buffer).fill(0, snap.header.memoryBytes);
          writeGlobals(snap.globals);
          writeTables(snap.tables);
          for (const c of snap.channels) host.reopenChannel(c.handle, c.name);
          clock.reset(Number(snap.header.podTimeMs));
          resolve({ podTimeMs: Number(snap.header.podTimeMs), events: snap.events });
        }
      } catch (err: unknown) {
        port.off('message', onMessage);
        reject(err);
      }
    };
    port.on('message', onMessage);
  });
}

function fail(reason: 'RestoreError' | 'Trap' | 'Error', message: string): void {
  dead = true;
  host.closeAll();
  post({ op: 'startFailed', reason, message });
}

async function start(): Promise<void> {
  // The main thread bounds the module's start function and k32_init/k32_restored (callDeadlineMs).
  post({ op: 'startCall', name: 'start' });
  try {
    instantiate();
    post({ op: 'startCall' });
  } catch (err: unknown) {
    // The start section trapped, or linking failed.
    fail(err instanceof WA.RuntimeError || err instanceof RangeError ? 'Trap' : 'Error', `cannot start the module: ${trapMessage(err)}`);
    return;
  }
  let events: Array<{ topic: string; payload: Uint8Array }> = [];
  if (init.restore) {
    try {
      ({ events } = await restore());
    } catch (err: unknown) {
      fail('RestoreError', `cannot restore the snapshot: ${trapMessage(err)}`);
      return;
    }
  }
  const first = init.restore ? 'k32_restored' : 'k32_init';
  const fn = ex<() => void>(first);
  if (fn && init.exportNames.includes(first)) {
    post({ op: 'startCall', name: first });
    try {
      fn();
    } catch (err: unknown) {
      fail('Trap', `${first}: ${trapMessage(err)}`);
      return;
    }
  }
  post({ op: 'ready', podTimeMs: clock.now(), events });
  if (init.kind === 'app' && init.entryPoint) {
    // An app pod: the entry point runs once, on this thread, until it returns.
    setImmediate(() => {
      try {
        ex<() => void>(init.entryPoint!)!();
        dead = true;
        post({ op: 'exit', reason: 'Completed', message: `${init.entryPoint} returned` });
      } catch (err: unknown) {
        dead = true;
        post({ op: 'exit', reason: 'Trap', message: `${init.entryPoint}: ${trapMessage(err)}` });
      }
    });
  }
}

/** Copies `data` into the module's memory at a fresh k32_alloc; 0 when the module has no room. */
function place(data: Uint8Array): number {
  const alloc = ex<(n: number) => number>('k32_alloc')!;
  const ptr = alloc(data.length) >>> 0;
  if (ptr === 0) return 0;
  const buf = memory!.buffer;
  if (ptr + data.length > buf.byteLength) throw new Error(`k32_alloc returned ${ptr}, which with ${data.length} bytes is outside the memory`);
  new Uint8Array(buf, ptr, data.length).set(data);
  return ptr;
}

const enc = new TextEncoder();

function call(m: Extract<ToWorker, { op: 'call' }>): void {
  const reply = (r: Omit<Extract<FromWorker, { op: 'result' }>, 'op' | 'id' | 'openFiles'>, transfer: ArrayBuffer[] = []): void =>
    post({ op: 'result', id: m.id, ...r, openFiles: host.openFiles() }, transfer);
  const name = m.kind === 'handle' ? 'k32_handle' : m.kind === 'tick' ? 'k32_tick' : 'k32_event';
  if (!init.exportNames.includes(name)) {
    reply({ error: { code: 'NotHandled', message: `the module does not export ${name}` } });
    return;
  }
  try {
    if (m.kind === 'tick') {
      ex<() => void>('k32_tick')!();
      reply({});
    } else if (m.kind === 'event') {
      const topic = enc.encode(m.topic);
      const both = new Uint8Array(topic.length + m.payload.length);
      both.set(topic);
      both.set(m.payload, topic.length);
      const ptr = place(both);
      if (ptr === 0) {
        reply({ error: { code: 'NoMemory', message: `k32_alloc(${both.length}) returned 0: the event on ${m.topic} was dropped` } });
        return;
      }
      ex<(a: number, b: number, c: number, d: number) => void>('k32_event')!(ptr, topic.length, ptr + topic.length, m.payload.length);
      reply({});
    } else {
      const ptr = place(m.request);
      if (ptr === 0) {
        reply({ error: { code: 'NoMemory', message: `k32_alloc(${m.request.length}) returned 0: no room for the request` } });
        return;
      }
      const packed = ex<(p: number, l: number) => bigint>('k32_handle')!(ptr, m.request.length);
      const rp = Number(packed & 0xffffffffn);
      const rl = Number((packed >> 32n) & 0xffffffffn);
      const buf = memory!.buffer;
      if (rp + rl > buf.byteLength) {
        reply({ error: { code: 'BadResponse', message: `k32_handle returned the range ${rp}+${rl}, outside the module's memory (${buf.byteLength} bytes)` } });
        return;
      }
      const response = new Uint8Array(buf.slice(rp, rp + rl));
      reply({ response }, [response.buffer]);
    }
  } catch (err: unknown) {
    dead = true;
    host.closeAll();
    reply({ error: { code: 'Trap', message: `${name}: ${trapMessage(err)}` } });
  }
}

/** Active snapshot streams by id: the generator of chunks, and how many more the main thread takes now. */
const streams = new Map<number, { gen: Generator<Uint8Array, void, undefined>; credit: number }>();

function snapshotState(events: Array<{ topic: string; payload: Uint8Array }>): SnapshotState {
  const { bytes, pages } = stateBytes();
  const at = frozenAt ?? { podTimeMs: clock.now(), unixTimeMs: Date.now() };
  return {
    imageSha256: init.imageSha256,
    memory: memory ? new Uint8Array(memory.buffer, 0, bytes) : new Uint8Array(0),
    memoryPages: pages,
    podTimeMs: BigInt(at.podTimeMs),
    unixTimeMs: BigInt(at.unixTimeMs),
    globals: readGlobals(),
    tables: readTables(),
    channels: [...host.channelsByHandle].map(([handle, name]) => ({ handle, name })),
    events,
  };
}

function hex(b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');
}

function snapshot(m: Extract<ToWorker, { op: 'snapshot' }>): void {
  try {
    const state = snapshotState(m.events);
    const byteLength = snapshotByteLength(state);
    let snapshotSha256: string | undefined;
    if (m.digest) {
      let last: Uint8Array | undefined;
      for (const c of encodeSnapshot(state, { chunkBytes: 1 << 24 })) last = c;
      snapshotSha256 = hex(last!.subarray(last!.length - 32));
    }
    streams.set(m.id, { gen: encodeSnapshot(state, { chunkBytes: m.chunkBytes }), credit: 0 });
    post({ op: 'snapshotInfo', id: m.id, byteLength, podTimeMs: Number(state.podTimeMs), ...(snapshotSha256 ? { snapshotSha256 } : {}) });
  } catch (err: unknown) {
    post({ op: 'snapshotInfo', id: m.id, byteLength: 0, podTimeMs: 0, error: trapMessage(err) });
  }
}

/** Sends chunks of a stream while the main thread has room for them (it grants credit as it consumes). */
function snapshotNext(id: number, credit: number): void {
  const s = streams.get(id);
  if (!s) {
    post({ op: 'snapshotChunk', id, error: 'no such snapshot stream' });
    return;
  }
  s.credit += credit;
  try {
    while (s.credit > 0) {
      const r = s.gen.next();
      if (r.done) {
        streams.delete(id);
        post({ op: 'snapshotChunk', id, end: true });
        return;
      }
      // One bounded copy out of the live memory, then transferred (not copied again).
      const chunk = r.value.slice();
      post({ op: 'snapshotChunk', id, chunk }, [chunk.buffer]);
      s.credit--;
    }
  } catch (err: unknown) {
    streams.delete(id);
    post({ op: 'snapshotChunk', id, error: trapMessage(err) });
  }
}

function onMessage(m: ToWorker): void {
  if (dead) return;
  switch (m.op) {
    case 'call': call(m); break;
    case 'freeze':
      frozenAt = { podTimeMs: clock.now(), unixTimeMs: Date.now() };
      post({ op: 'done', id: m.id, podTimeMs: frozenAt.podTimeMs });
      break;
    case 'thaw':
      frozenAt = undefined;
      streams.clear();
      post({ op: 'done', id: m.id });
      break;
    case 'snapshot': snapshot(m); break;
    case 'snapshotNext': snapshotNext(m.id, m.credit); break;
    case 'snapshotCancel': streams.delete(m.id); break;
    default: break; // restore messages are handled while restoring
  }
}

post({ op: 'booted' });
port.once('message', (m: ToWorker) => {
  if (m.op !== 'init') throw new Error(`a pod worker's first message must be init, got ${m.op}`);
  setup(m.init);
  port.on('message', onMessage);
  void start();
});
