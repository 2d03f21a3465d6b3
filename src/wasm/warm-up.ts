/**
 * A pod thread's warm-up, run once as it boots (before it reports `booted`), off any pod's critical
 * path: V8 compiles a function the first time it runs, in each isolate, and every pod thread is a
 * fresh isolate. Without it, a pod's start, its first snapshot and a restore paid for compiling the
 * context's and the K32S writer's and reader's code (and the first SHA-256) in the middle of a move.
 */
import { MessageChannel } from 'node:worker_threads';
import { encodeSnapshot, SnapshotDecoder, snapshotByteLength, snapshotSha256, type SnapshotState } from '../k32s/index.ts';
import { PodContext } from './pod-context.ts';
import type { FromWorker, ToWorker, WorkerInit } from './protocol.ts';
import { ThreadStatus } from './thread-status.ts';
import { WA } from './wasm-api.ts';

/**
 * Writes and reads back a small snapshot with every kind of section (4 KiB of memory, a global
 * of each kind, a table, a channel, an event), as a snapshot and a restore do, and checks that it
 * round-trips.
 * @throws Error when the snapshot does not read back (a broken build: better known at boot)
 */
export function warmUpSnapshotCode(): void {
  const state: SnapshotState = {
    imageSha256: new Uint8Array(32),
    memory: new Uint8Array(4096),
    memoryPages: 1,
    podTimeMs: 1n,
    unixTimeMs: 1n,
    globals: [{ index: 0, type: 0x7f, bits: 1n }, { index: 1, type: 0x7e, bits: 2n }, { index: 2, type: 0x7d, bits: 3n }, { index: 3, type: 0x7c, bits: 4n }, { index: 4, type: 0x70, bits: 0n }],
    tables: [{ index: 0, entries: Uint32Array.of(0, 0xffffffff) }],
    channels: [{ handle: 1, name: 'warm-up' }],
    events: [{ topic: 'warm-up', payload: new Uint8Array(1) }],
  };
  const length = snapshotByteLength(state);
  const sha256 = snapshotSha256(state);
  const decoder = new SnapshotDecoder({
    expectedImageSha256: state.imageSha256,
    memoryLimitBytes: 4096,
    module: { globals: new Map(state.globals.map((g) => [g.index, g.type])), tables: new Map([[0, { min: 2 }]]), functionCount: 1 },
    memory: () => new Uint8Array(4096),
  });
  let bytes = 0;
  for (const chunk of encodeSnapshot(state, { chunkBytes: 2048, sha256 })) {
    decoder.push(chunk.slice());
    bytes += chunk.length;
  }
  const back = decoder.end();
  if (bytes !== length || !back.trailerOk || back.globals.length !== 5) throw new Error('the pod thread\'s warm-up snapshot did not read back');
}

/**
 * A module already in the instrumented form (`\0k32:` exports of its memory, global 0, table 0 and
 * functions 0 and 1), so the thread need not load one: one page of memory, a mutable i32 global, a
 * table of 2 entries, `k32_init` (sets the global, writes 42 at address 8) and `k32_tick`. From:
 * (module (memory (export "\00k32:memory") 1) (global $g (mut i32) (i32.const 0))
 *   (export "\00k32:global:0" (global $g)) (table $t 2 funcref) (export "\00k32:table:0" (table $t))
 *   (elem (i32.const 0) $init)
 *   (func $init (export "k32_init") (global.set $g (i32.const 1)) (i32.store (i32.const 8) (i32.const 42)))
 *   (func $tick (export "k32_tick")) (export "\00k32:func:0" (func $init)) (export "\00k32:func:1" (func $tick)))
 */
const WARM_UP_MODULE = 'AGFzbQEAAAABBAFgAAADAwIAAAQEAXAAAgUDAQABBgYBfwFBAAsHYAcLAGszMjptZW1vcnkCAA0AazMyOmdsb2JhbDowAwAMAGszMjp0YWJsZTowAQAIazMyX2luaXQAAAhrMzJfdGljawABCwBrMzI6ZnVuYzowAAALAGszMjpmdW5jOjEAAQkHAQBBAAsBAAoSAg0AQQEkAEEIQSo2AgALAgAL';

/** A context of the warm-up pod on a channel of its own, and what it sends. */
function warmUpContext(init: WorkerInit): { post: (m: ToWorker) => void; next: (op: FromWorker['op']) => Promise<FromWorker>; ctx: PodContext; close: () => void } {
  const { port1, port2 } = new MessageChannel();
  const inbox: FromWorker[] = [];
  let wake: (() => void) | undefined;
  port1.on('message', (m: FromWorker) => {
    inbox.push(m);
    wake?.();
  });
  const ctx = new PodContext(0, port2, init, new ThreadStatus(), new Int32Array(new SharedArrayBuffer(4)), new SharedArrayBuffer(16), () => {});
  const next = async (op: FromWorker['op']): Promise<FromWorker> => {
    for (;;) {
      const i = inbox.findIndex((m) => m.op === op || m.op === 'startFailed');
      if (i >= 0) {
        const m = inbox.splice(i, 1)[0]!;
        if (m.op === 'startFailed') throw new Error(`the pod thread's warm-up pod failed: ${m.message}`);
        return m;
      }
      await new Promise<void>((r) => { wake = r; });
    }
  };
  return { post: (m) => port1.postMessage(m), next, ctx, close: () => { ctx.detach(); port1.close(); } };
}

/**
 * Runs a small pod through what a move does on a pod thread, on channels inside the thread (nothing
 * reaches the main thread, and the thread's status is not touched): a start, a freeze, a snapshot
 * with its digest streamed to its end, a restore of it into a second context, and checks that the
 * restored pod holds the state.
 * @throws Error when a step fails (a broken build: better known at boot)
 */
export async function warmUpPodCode(): Promise<void> {
  const compiled = new WA.Module(Buffer.from(WARM_UP_MODULE, 'base64'));
  const init: WorkerInit = {
    compiled,
    kind: 'request',
    exportNames: ['k32_init', 'k32_tick'],
    imageSha256: new Uint8Array(32),
    k32sShape: { globals: new Map([[0, 0x7f]]), tables: new Map([[0, { min: 2 }]]), functionCount: 2 },
    globalTypes: [[0, 0x7f]],
    tableIndices: [0],
    functionCount: 2,
    hasMemory: true,
    // A limit below one page: the snapshot carries 4 KiB of memory, and the warm-up leaves little behind.
    memoryLimitBytes: 4096,
    memoryPagesLimit: 1,
    subPageLimit: true,
    env: {},
    assets: {},
    restore: false,
  };
  const source = warmUpContext(init);
  const target = warmUpContext({ ...init, restore: true });
  try {
    await source.ctx.start();
    await source.next('ready');
    source.post({ op: 'freeze', id: 1 });
    await source.next('done');
    source.post({ op: 'snapshot', id: 2, events: [{ topic: 'warm-up', payload: new Uint8Array(1) }], digest: true, chunkBytes: 2048, credit: 2 });
    await source.next('snapshotInfo');
    const started = target.ctx.start();
    for (;;) {
      const m = (await source.next('snapshotChunk')) as Extract<FromWorker, { op: 'snapshotChunk' }>;
      if (m.error) throw new Error(`the pod thread's warm-up snapshot failed: ${m.error}`);
      if (m.end) break;
      target.post({ op: 'restoreChunk', chunk: m.chunk! });
      source.post({ op: 'snapshotNext', id: 2, credit: 1 });
    }
    target.post({ op: 'restoreEnd' });
    await started;
    const ready = (await target.next('ready')) as Extract<FromWorker, { op: 'ready' }>;
    if (ready.events.length !== 1) throw new Error('the pod thread\'s warm-up restore lost its held event');
  } finally {
    source.close();
    target.close();
  }
}
