/**
 * The pod runtime end to end, on hand-written WAT (test/fixtures/wasm/state.wat and inline
 * modules): every k32 import, freeze and thaw, held events, snapshot and restore with the state
 * compared, refusals of a restore, blockers, traps, memory limits, logs.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { NULL_FUNCREF } from '../../src/k32s/index.ts';
import { PodCallError, PodInstance, PodStartError, PodStateError, loadModule, type LogEntry, type PodModule } from '../../src/wasm/index.ts';
import { decode, DENSE, get, pieces, snapshotBytes, startPod, stateNumbers, tempDir, wat } from './helpers.ts';
import { waitFor } from '../helpers/wait.ts';

const STATE = wat('state.wat');
let stateModule: PodModule | undefined;
async function stateMod(): Promise<PodModule> {
  stateModule ??= await loadModule(STATE, { memoryLimitBytes: 1 << 20 });
  return stateModule;
}

/** Polls `f` (a pod's own answer) until it returns true, within `ms`. */
const until = async (f: () => Promise<boolean> | boolean, ms = 5000): Promise<void> => {
  await waitFor('the condition', ms, f, { intervalMs: 0 });
};

test('k32_env and k32_asset copy values, -1 for what is not set', { timeout: 30_000 }, async (t) => {
  const pod = await startPod(await stateMod(), { env: { NAME: 'hello' }, assets: { greeting: new TextEncoder().encode('hi there') } });
  t.after(() => pod.terminate());
  assert.equal(stateNumbers(await pod.handle(get('/e'))).result, 5n);
  assert.equal(stateNumbers(await pod.handle(get('/a'))).result, 8n);
  const bare = await startPod(await stateMod());
  t.after(() => bare.terminate());
  assert.equal(stateNumbers(await bare.handle(get('/e'))).result, -1n);
  assert.equal(stateNumbers(await bare.handle(get('/a'))).result, -1n);
});

test('k32_init runs once; k32_log lines reach the ring and onLog; logs read with tail, since and follow', { timeout: 30_000 }, async (t) => {
  const seen: LogEntry[] = [];
  const pod = await startPod(await stateMod(), { onLog: (e) => seen.push(e) });
  t.after(() => pod.terminate());
  const n = stateNumbers(await pod.handle(get('/x')));
  assert.equal(n.inits, 1);
  assert.equal(n.restored, 0);
  assert.deepEqual(seen.map((e) => e.line), ['init']);
  const all: string[] = [];
  for await (const e of pod.logs()) all.push(e.line);
  assert.deepEqual(all, ['init']);
  const none: string[] = [];
  for await (const e of pod.logs({ sinceTime: Date.now() + 60_000 })) none.push(e.line);
  assert.deepEqual(none, []);
  const tail0: string[] = [];
  for await (const e of pod.logs({ tail: 0 })) tail0.push(e.line);
  assert.deepEqual(tail0, []);
  // follow: a restore of this pod logs "restored" in its own ring; here, follow ends with the container.
  const ac = new AbortController();
  const followed: string[] = [];
  const reading = (async () => {
    for await (const e of pod.logs({ follow: true, signal: ac.signal })) {
      followed.push(e.line);
      if (followed.length === 1) void pod.terminate();
    }
  })();
  await reading;
  assert.deepEqual(followed, ['init']);
  assert.equal((await pod.exited).reason, 'Completed');
});

test('k32_time_ms counts from the start and never goes backward', { timeout: 30_000 }, async (t) => {
  const mod = await stateMod();
  const t0 = performance.now();
  const pod = await startPod(mod);
  t.after(() => pod.terminate());
  let last = -1;
  for (let i = 0; i < 20; i++) {
    const n = stateNumbers(await pod.handle(get('/x')));
    assert.ok(n.time >= last, `time went from ${last} to ${n.time}`);
    last = n.time;
  }
  // From the start: at most the time since the start was asked, however slow the machine.
  const sinceStartMs = performance.now() - t0;
  assert.ok(last >= 0 && last <= sinceStartMs + 1, `pod time ${last} ms, ${sinceStartMs.toFixed(1)} ms after the start was asked`);
});

test('channels: the same name gives the same handle; sends go out through onChannelSend', { timeout: 30_000 }, async (t) => {
  const sent: Array<[string, string]> = [];
  const pod = await startPod(await stateMod(), { onChannelSend: (topic, p) => sent.push([topic, Buffer.from(p).toString()]) });
  t.after(() => pod.terminate());
  assert.equal(stateNumbers(await pod.handle(get('/c'))).result, 1n);
  assert.equal(stateNumbers(await pod.handle(get('/c'))).result, 1n);
  assert.deepEqual(sent, [['chan-a', 'chan-a'], ['chan-a', 'chan-a']]);
});

test('k32_fs stays in the pod\'s directory, and an open descriptor blocks a move', { timeout: 30_000 }, async (t) => {
  const fs = tempDir('fs');
  t.after(fs.remove);
  const pod = await startPod(await stateMod(), { fsDir: fs.dir });
  t.after(() => pod.terminate());
  assert.equal(stateNumbers(await pod.handle(get('/w'))).result, 3n, 'the first descriptor is 3');
  assert.deepEqual(pod.openFiles, [{ fd: 3, path: 'f.txt' }]);
  assert.deepEqual(pod.blockers(), ['open file f.txt (descriptor 3)']);
  await pod.freeze();
  await assert.rejects(pod.snapshot(), (e: unknown) => e instanceof PodStateError && e.code === 'NotMovable' && e.blockers[0] === 'open file f.txt (descriptor 3)');
  await pod.thaw();
  assert.equal(stateNumbers(await pod.handle(get('/x'))).result, 0n, 'close answers 0');
  assert.deepEqual(pod.blockers(), []);
  assert.equal(readFileSync(join(fs.dir, 'f.txt'), 'utf8'), 'greeting');
  assert.equal(stateNumbers(await pod.handle(get('/r'))).result, 8n, 'reads back 8 bytes');
  assert.equal(stateNumbers(await pod.handle(get('/p'))).result, -13n, '../escape is -EACCES');
  // A symbolic link placed in the pod's directory does not lead out of it.
  const outside = tempDir('outside');
  t.after(outside.remove);
  rmSync(join(fs.dir, 'f.txt'));
  symlinkSync(join(outside.dir, 'secret'), join(fs.dir, 'f.txt'));
  assert.equal(stateNumbers(await pod.handle(get('/w'))).result, -40n, 'a link as the last component is -ELOOP');
  assert.deepEqual(readdirSync(outside.dir), []);
  assert.equal(stateNumbers(await pod.handle(get('/x'))).result, -9n, 'closing a closed descriptor is -EBADF');
});

test('a frozen pod answers Frozen, stops ticking, holds 8 events and drops the rest; thaw delivers them first', { timeout: 30_000 }, async (t) => {
  const pod = await startPod(await stateMod(), { tickIntervalMs: 2 });
  t.after(() => pod.terminate());
  await until(async () => stateNumbers(await pod.handle(get('/x'))).ticks > 0n);
  await pod.freeze();
  assert.equal(pod.frozen, true);
  await assert.rejects(pod.handle(get('/x')), (e: unknown) => e instanceof PodCallError && e.code === 'Frozen');
  for (let i = 0; i < 10; i++) pod.event('topic', Uint8Array.of(i));
  assert.equal(pod.heldEvents, 8);
  assert.equal(pod.droppedEvents, 2);
  const a = await snapshotBytes(pod);
  // A twin that is not frozen, ticking at the same interval, is the clock: once it has ticked 15 more
  // times, the frozen pod would have too, had it not been frozen.
  const twin = await startPod(await stateMod(), { tickIntervalMs: 2 });
  t.after(() => twin.terminate());
  const twinTicks = async () => stateNumbers(await twin.handle(get('/x'))).ticks;
  const from = await twinTicks();
  await until(async () => (await twinTicks()) >= from + 15n);
  const b = await snapshotBytes(pod);
  assert.deepEqual(a, b, 'the same frozen pod gives the same bytes');
  const decoded = await decode(a);
  assert.deepEqual(decoded.events.map((e) => [...e.payload]), [[0], [1], [2], [3], [4], [5], [6], [7]]);
  await pod.thaw();
  const n = stateNumbers(await pod.handle(get('/x')));
  assert.equal(n.events, 8, 'held events are delivered before the next request');
  await assert.rejects(pod.thaw(), (e: unknown) => e instanceof PodStateError && e.code === 'NotFrozen');
});

test('snapshot and restore carry memory, globals of every type, tables, clock and channels', { timeout: 30_000 }, async (t) => {
  const mod = await stateMod();
  const sent: string[] = [];
  const pod = await startPod(mod, { tickIntervalMs: 1, onChannelSend: (topic) => sent.push(topic) });
  t.after(() => pod.terminate());
  await pod.handle(get('/s')); // sets tables and float globals at run time
  await pod.handle(get('/c')); // opens chan-a as handle 1
  await until(async () => stateNumbers(await pod.handle(get('/x'))).ticks > -9000000000n + 2n);
  pod.event('ev', new TextEncoder().encode('payload-1'));
  // event() is fire-and-forget: wait until the pod has taken it, so that it is not held by the freeze.
  await until(async () => stateNumbers(await pod.handle(get('/x'))).events >= 1);
  await pod.freeze();
  const snap = await pod.snapshot({ digest: true });
  const parts: Uint8Array[] = [];
  for await (const c of snap.chunks) parts.push(c);
  const bytesA = Buffer.concat(parts);
  assert.equal(bytesA.length, snap.byteLength);
  assert.equal(snap.imageSha256, mod.imageSha256);
  assert.equal(snap.snapshotSha256, createHash('sha256').update(bytesA.subarray(0, -32)).digest('hex'));
  const A = await decode(bytesA);
  assert.equal(A.header.podTimeMs, BigInt(snap.podTimeMs));

  // What the module holds, by the module's own indices (imports are functions 0-9; $one 10, $two 11, $three 12).
  assert.deepEqual([...A.tables[0]!.entries], [NULL_FUNCREF, 10, 11, NULL_FUNCREF]);
  assert.deepEqual([...A.tables[1]!.entries], [NULL_FUNCREF, 12, NULL_FUNCREF, NULL_FUNCREF, 10], 'table 1 set and grown at run time');
  const g = new Map(A.globals.map((x) => [x.index, x]));
  assert.equal(g.get(7)!.type, 0x70);
  assert.equal(g.get(7)!.bits, 11n, 'the funcref global holds $two');
  assert.equal(g.get(5)!.type, 0x7d);
  assert.equal(g.get(5)!.bits, 0x40300000n, 'f32 2.75');
  assert.equal(g.get(6)!.type, 0x7c);
  const f64 = new DataView(new ArrayBuffer(8));
  f64.setFloat64(0, 6.0221e23, true);
  assert.equal(g.get(6)!.bits, f64.getBigUint64(0, true));
  assert.equal(g.get(3)!.type, 0x7e);
  assert.ok(BigInt.asIntN(64, g.get(3)!.bits) > -9000000000n, 'i64 ticks, negative, carried as two\'s complement');
  assert.ok(!g.has(1) && !g.has(4), 'immutable globals are not state');
  assert.deepEqual(A.channels, [{ handle: 1, name: 'chan-a' }]);
  assert.deepEqual(A.events, []);

  // Restore in a fresh runtime from odd-sized chunks, freeze it at once and compare.
  const sent2: string[] = [];
  const pod2 = await startPod(mod, { restoreFrom: pieces(bytesA, 7777), onChannelSend: (topic) => sent2.push(topic) });
  t.after(() => pod2.terminate());
  await pod2.freeze();
  const B = await decode(await snapshotBytes(pod2));
  assert.deepEqual(B.memory!.subarray(0, B.header.memoryBytes), A.memory!.subarray(0, A.header.memoryBytes), 'memory');
  assert.deepEqual(B.tables, A.tables, 'tables');
  const differ = B.globals.filter((x, i) => x.bits !== A.globals[i]!.bits).map((x) => x.index);
  assert.deepEqual(differ, [9], 'every global equal but $restored, which k32_restored increments');
  assert.equal(B.globals.find((x) => x.index === 9)!.bits, 1n);
  assert.deepEqual(B.channels, A.channels);
  assert.ok(B.header.podTimeMs >= A.header.podTimeMs, 'the clock carries over and never goes backward');
  // With an event held while frozen: delivered after k32_restored; the channel keeps its handle.
  pod.event('held', new TextEncoder().encode('while-frozen'));
  const withEvent = await snapshotBytes(pod);
  assert.deepEqual((await decode(withEvent)).events.map((e) => e.topic), ['held']);
  const pod3 = await startPod(mod, { restoreFrom: pieces(withEvent, 65536), onChannelSend: (topic) => sent2.push(topic) });
  t.after(() => pod3.terminate());
  const n = stateNumbers(await pod3.handle(get('/c')));
  assert.equal(n.result, 1n, 'kube32_channel_open("chan-a") gives the same handle after a restore');
  assert.equal(n.restored, 1);
  assert.equal(n.inits, 1, 'k32_init did not run again');
  assert.equal(n.events, Number(g.get(8)!.bits) + 1, 'the held event was delivered');
  assert.ok(n.time >= snap.podTimeMs);
  assert.deepEqual(sent2, ['chan-a']);
});

test('a restore refuses another module\'s snapshot, a damaged one, a truncated one, one over the memory limit', { timeout: 30_000 }, async (t) => {
  const mod = await stateMod();
  const pod = await startPod(mod);
  t.after(() => pod.terminate());
  await pod.handle(get('/g')); // 2 pages
  await pod.freeze();
  const bytes = await snapshotBytes(pod);
  const refuses = async (module: PodModule, source: Uint8Array, pattern: RegExp): Promise<void> => {
    await assert.rejects(startPod(module, { restoreFrom: pieces(source, 4096) }), (e: unknown) => {
      assert.ok(e instanceof PodStartError, String(e));
      assert.equal(e.reason, 'RestoreError');
      assert.match(e.message, /^cannot restore the snapshot: /);
      assert.match(e.message, pattern);
      return true;
    });
  };
  const other = await loadModule(wat('(module (memory (export "memory") 1) (func (export "k32_tick")))'));
  await refuses(other, bytes, /taken from the module sha256:/);
  const damaged = Uint8Array.from(bytes);
  damaged[1000] = damaged[1000]! ^ 0xff;
  await refuses(mod, damaged, /trailer/);
  await refuses(mod, bytes.subarray(0, bytes.length - 10), /end/i);
  const small = await loadModule(STATE, { memoryLimitBytes: 65536 });
  await refuses(small, bytes, /memory limit/);
});

test('a trap ends the container with reason Trap and its message; the caller learns it', { timeout: 30_000 }, async (t) => {
  const pod = await startPod(await stateMod());
  t.after(() => pod.terminate());
  await assert.rejects(pod.handle(get('/u')), (e: unknown) => e instanceof PodCallError && e.code === 'Trap' && /k32_handle: unreachable/.test(e.message));
  const exit = await pod.exited;
  assert.equal(exit.reason, 'Trap');
  assert.match(exit.message, /unreachable/);
  assert.equal(exit.exitCode, 1);
  await assert.rejects(pod.handle(get('/x')), (e: unknown) => e instanceof PodCallError && e.code === 'NotRunning');
  const lines: string[] = [];
  for await (const e of pod.logs()) lines.push(e.line);
  assert.ok(lines.some((l) => /trap: k32_handle: unreachable/.test(l)));
  // A trap in k32_init: the pod does not start.
  const bad = await loadModule(wat('(module (func (export "k32_init") unreachable) (func (export "k32_tick")))'));
  await assert.rejects(startPod(bad), (e: unknown) => e instanceof PodStartError && e.reason === 'Trap' && /k32_init: unreachable/.test(e.message));
  // A host function given a range outside memory traps.
  const oob = await loadModule(wat('(module (import "k32" "k32_log" (func $l (param i32 i32))) (memory (export "memory") 1) (func (export "k32_tick") (call $l (i32.const 65530) (i32.const 100))))'));
  const p2 = await startPod(oob, { tickIntervalMs: 1 });
  t.after(() => p2.terminate());
  const e2 = await p2.exited;
  assert.equal(e2.reason, 'Trap');
  assert.match(e2.message, /k32_tick: k32_log: range 65530\+100 is outside the module's memory/);
});

test('a call past the freeze timeout is a blocker, the pod keeps running, terminate ends it', {
  timeout: 30_000,
  skip: DENSE ? 'on a shared thread a call past its deadline ends the pod and stops the thread (shared-threads.test.ts)' : false,
}, async (t) => {
  const pod = await startPod(await stateMod(), { callDeadlineMs: 100 });
  t.after(() => pod.terminate());
  const overdue = once(pod, 'overdue');
  const looping = pod.handle(get('/l')).catch((e: unknown) => e);
  assert.deepEqual((await overdue)[0], { name: 'k32_handle', ms: 100 });
  await assert.rejects(pod.freeze(150), (e: unknown) => {
    assert.ok(e instanceof PodStateError);
    assert.equal(e.code, 'Timeout');
    assert.deepEqual(e.blockers, ['call k32_handle still running after 150 ms']);
    return true;
  });
  assert.equal(pod.frozen, false, 'the pod keeps running');
  assert.equal(pod.runningCall?.name, 'k32_handle');
  assert.deepEqual(pod.blockers(100), ['call k32_handle still running after 100 ms']);
  assert.deepEqual(pod.blockers(), [], 'not yet past the default 10 s');
  const exit = await pod.terminate();
  assert.equal(exit.reason, 'Completed');
  const err = await looping;
  assert.ok(err instanceof PodCallError && err.code === 'NotRunning');
});

test('memory never grows past the limit; below one page only the limit is backed', { timeout: 30_000 }, async (t) => {
  const limited = await loadModule(STATE, { memoryLimitBytes: 2 * 65536 });
  const pod = await startPod(limited);
  t.after(() => pod.terminate());
  assert.equal(stateNumbers(await pod.handle(get('/g'))).result, 1n, 'grows from 1 page to 2');
  assert.equal(stateNumbers(await pod.handle(get('/g'))).result, -1n, 'a third page is refused');
  // The limit given at start wins over the one the module was loaded for (the kubelet's path).
  const viaStart = await startPod(await stateMod(), { memoryLimitBytes: 2 * 65536 });
  t.after(() => viaStart.terminate());
  assert.equal(viaStart.module.memoryPagesLimit, 2);
  assert.equal(stateNumbers(await viaStart.handle(get('/g'))).result, 1n);
  assert.equal(stateNumbers(await viaStart.handle(get('/g'))).result, -1n);

  const tiny = await loadModule(wat(`(module (import "k32" "k32_log" (func $l (param i32 i32))) (memory (export "memory") 1) (global $n (mut i32) (i32.const 0))
    (func (export "k32_tick") (i32.store (i32.const 996) (i32.const 0x01020304)) (i32.store (i32.const 2000) (i32.const 7))
      (global.set $n (i32.add (global.get $n) (i32.const 1))) (call $l (i32.const 996) (i32.const 1))))`), { memoryLimitBytes: 1000 });
  assert.equal(tiny.subPageLimit, true);
  const ticked = Promise.withResolvers<void>();
  const p = await startPod(tiny, { tickIntervalMs: 1, onLog: () => ticked.resolve() });
  t.after(() => p.terminate());
  await ticked.promise;
  await p.freeze();
  const bytes = await snapshotBytes(p);
  const s = await decode(bytes);
  assert.equal(s.header.memoryBytes, 1000);
  assert.equal(s.header.memoryPages, 1);
  assert.deepEqual([...s.memory!.subarray(996, 1000)], [4, 3, 2, 1]);
  assert.ok(s.globals[0]!.bits > 0n);
  const restored = await startPod(tiny, { restoreFrom: pieces(bytes, 100) });
  t.after(() => restored.terminate());
  await restored.freeze();
  const r = await decode(await snapshotBytes(restored));
  assert.deepEqual(r.memory!.subarray(0, 1000), s.memory!.subarray(0, 1000));
  assert.deepEqual(r.globals, s.globals);
});

test('blockers: an app pod\'s entry point, a table of externref', { timeout: 30_000 }, async (t) => {
  const app = await loadModule(wat('(module (import "k32" "k32_log" (func $l (param i32 i32))) (memory (export "memory") 1) (data (i32.const 0) "app ran") (func (export "_start") (call $l (i32.const 0) (i32.const 7))))'));
  const pod = await startPod(app);
  t.after(() => pod.terminate());
  assert.deepEqual(pod.blockers(), ['entry point _start runs on its own thread']);
  await assert.rejects(pod.handle(get('/')), (e: unknown) => e instanceof PodCallError && e.code === 'NotHandled');
  const exit = await pod.exited;
  assert.equal(exit.reason, 'Completed');
  const lines: string[] = [];
  for await (const e of pod.logs()) lines.push(e.line);
  assert.deepEqual(lines, ['app ran']);

  // An app pod that never returns cannot be frozen: refused at once, not left waiting.
  const forever = await loadModule(wat('(module (func (export "app_main") (loop $l (br $l))))'));
  const busy = await startPod(forever);
  t.after(() => busy.terminate());
  await assert.rejects(busy.freeze(100), (e: unknown) => e instanceof PodStateError && e.code === 'NotMovable' && e.blockers[0] === 'entry point app_main runs on its own thread');
  assert.equal((await busy.terminate()).reason, 'Completed');

  const ext = await loadModule(wat('(module (table 2 externref) (func (export "k32_tick")))'));
  const p2 = await startPod(ext);
  t.after(() => p2.terminate());
  assert.deepEqual(p2.blockers(), ['table 0 holds externref, not functions']);
  await p2.freeze();
  await assert.rejects(p2.snapshot(), (e: unknown) => e instanceof PodStateError && e.code === 'NotMovable');
});

test('snapshot of a running pod is refused; options are checked', { timeout: 30_000 }, async (t) => {
  const pod = await startPod(await stateMod());
  t.after(() => pod.terminate());
  await assert.rejects(pod.snapshot(), (e: unknown) => e instanceof PodStateError && e.code === 'NotFrozen');
  await assert.rejects(pod.freeze(0), RangeError);
  await assert.rejects(pod.freeze(60_001), RangeError);
  await assert.rejects(PodInstance.start({ module: await stateMod(), namespace: '', podName: 'p', containerName: 'c' }), RangeError);
});

/** A module whose k32_handle runs edge cases of channels and files and returns the results as i32s. */
const EDGES = `(module
  (import "k32" "kube32_channel_open" (func $open (param i32 i32) (result i32)))
  (import "k32" "k32_channel_send" (func $send (param i32 i32 i32) (result i32)))
  (import "k32" "k32_fs_open" (func $fopen (param i32 i32 i32) (result i32)))
  (import "k32" "k32_fs_read" (func $fread (param i32 i32 i32) (result i32)))
  (import "k32" "k32_fs_write" (func $fwrite (param i32 i32 i32) (result i32)))
  (import "k32" "k32_fs_close" (func $fclose (param i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 200) "log.txt")
  (data (i32.const 216) "/sub/../x.txt")
  (func (export "k32_alloc") (param i32) (result i32) (i32.const 8192))
  (func (export "k32_handle") (param i32 i32) (result i64) (local $fd i32)
    (i32.store (i32.const 1000) (call $open (i32.const 0) (i32.const 0)))
    (i32.store (i32.const 1004) (call $open (i32.const 0) (i32.const 129)))
    (i32.store (i32.const 1008) (call $open (i32.const 0) (i32.const 128)))
    (i32.store (i32.const 1012) (call $send (i32.const 99) (i32.const 0) (i32.const 1)))
    (i32.store (i32.const 1016) (call $send (i32.const 1) (i32.const 0) (i32.const 4097)))
    (i32.store (i32.const 1020) (call $send (i32.const 1) (i32.const 0) (i32.const 4096)))
    (i32.store (i32.const 1024) (call $fopen (i32.const 200) (i32.const 7) (i32.const 7)))
    (local.set $fd (call $fopen (i32.const 200) (i32.const 7) (i32.const 2)))
    (drop (call $fwrite (local.get $fd) (i32.const 200) (i32.const 3)))
    (drop (call $fclose (local.get $fd)))
    (local.set $fd (call $fopen (i32.const 200) (i32.const 7) (i32.const 2)))
    (drop (call $fwrite (local.get $fd) (i32.const 200) (i32.const 3)))
    (drop (call $fclose (local.get $fd)))
    (local.set $fd (call $fopen (i32.const 200) (i32.const 7) (i32.const 0)))
    (i32.store (i32.const 1028) (call $fread (local.get $fd) (i32.const 300) (i32.const 100)))
    (i32.store (i32.const 1032) (call $fread (local.get $fd) (i32.const 300) (i32.const 100)))
    (i32.store (i32.const 1036) (call $fwrite (local.get $fd) (i32.const 300) (i32.const 1)))
    (drop (call $fclose (local.get $fd)))
    (local.set $fd (call $fopen (i32.const 216) (i32.const 13) (i32.const 1)))
    (i32.store (i32.const 1040) (local.get $fd))
    (drop (call $fclose (local.get $fd)))
    (i32.store (i32.const 1044) (call $fread (i32.const 77) (i32.const 300) (i32.const 1)))
    (i64.or (i64.const 1000) (i64.shl (i64.const 48) (i64.const 32)))))`;

test('channel and file edge cases: names, payload size, handles, flags, append, errnos', { timeout: 30_000 }, async (t) => {
  const fs = tempDir('edges');
  t.after(fs.remove);
  const sent: Array<[string, number]> = [];
  const mod = await loadModule(wat(EDGES));
  const pod = await startPod(mod, { fsDir: fs.dir, onChannelSend: (topic, p) => sent.push([topic, p.length]) });
  t.after(() => pod.terminate());
  const raw = await pod.handle(get('/'));
  const r = [...new Int32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4)];
  assert.deepEqual(r, [
    -1, // channel name of 0 bytes
    -1, // channel name of 129 bytes
    1, // channel name of 128 bytes: handle 1
    -1, // send on an unknown handle
    -1, // send of 4097 bytes
    0, // send of 4096 bytes
    -22, // k32_fs_open with flags 7: -EINVAL
    6, // two appends of 3 bytes, read back
    0, // then the end of the file
    -9, // write to a descriptor open for reading: -EBADF
    3, // "/sub/../x.txt" stays inside the pod's directory
    -9, // read of a descriptor never opened
  ]);
  assert.equal(readFileSync(join(fs.dir, 'log.txt'), 'utf8'), 'loglog');
  assert.equal(readFileSync(join(fs.dir, 'x.txt'), 'utf8'), '');
  assert.deepEqual(sent, [['\u0000'.repeat(128), 4096]], 'one send went out: 4096 bytes on the 128-byte topic');
  assert.deepEqual(pod.blockers(), []);
  // Without a storage directory, k32_fs_open answers -ENOSYS.
  const bare = await startPod(mod);
  t.after(() => bare.terminate());
  const r2 = await bare.handle(get('/'));
  const r2i = new Int32Array(r2.buffer, r2.byteOffset, 12);
  assert.equal(r2i[6], -38);
  assert.equal(r2i[10], -38);
});

test('a refused restore closes its source', { timeout: 30_000 }, async () => {
  const mod = await loadModule(STATE, { memoryLimitBytes: 1 << 20 });
  let closed = false;
  let pulled = 0;
  async function* source(): AsyncGenerator<Uint8Array> {
    try {
      yield new TextEncoder().encode('NOT A SNAPSHOT AT ALL, more than sixty-eight bytes of it, so the header is read whole.');
      for (;;) {
        pulled++;
        yield new Uint8Array(65536);
      }
    } finally {
      closed = true;
    }
  }
  await assert.rejects(startPod(mod, { restoreFrom: source() }), (e: unknown) => e instanceof PodStartError && e.reason === 'RestoreError' && /K32S/.test(e.message));
  await until(() => closed);
  assert.ok(pulled < 100, `the source was read on after the refusal: ${pulled} chunks`);
});

test('f32 and f64 globals keep every bit, NaN payloads included, through a snapshot and a restore', { timeout: 30_000 }, async (t) => {
  const mod = await loadModule(wat(`(module
    (global $a (mut f32) (f32.const nan:0x200001))
    (global $b (mut f64) (f64.const -nan:0x8000000000001))
    (global $c (mut f32) (f32.const -0))
    (global $d f64 (f64.const 1))
    (global $e (mut f64) (f64.const -inf))
    (func (export "k32_tick")))`));
  assert.deepEqual(mod.exports.map((e) => e.name), ['k32_tick'], 'the accessors are the runtime\'s, not the module\'s');
  const pod = await startPod(mod);
  t.after(() => pod.terminate());
  await pod.freeze();
  const bytes = await snapshotBytes(pod);
  const A = await decode(bytes);
  assert.deepEqual(A.globals.map((g) => [g.index, g.type, g.bits.toString(16)]), [
    [0, 0x7d, '7fa00001'],
    [1, 0x7c, 'fff8000000000001'],
    [2, 0x7d, '80000000'],
    [4, 0x7c, 'fff0000000000000'],
  ]);
  const restored = await startPod(mod, { restoreFrom: pieces(bytes, 1000) });
  t.after(() => restored.terminate());
  await restored.freeze();
  assert.deepEqual((await decode(await snapshotBytes(restored))).globals, A.globals);
});

test('k32_log: long lines are cut, a flood is rate-limited and the dropped lines counted', { timeout: 30_000 }, async (t) => {
  const mod = await loadModule(wat(`(module (import "k32" "k32_log" (func $l (param i32 i32))) (memory (export "memory") 1)
    (func (export "k32_alloc") (param i32) (result i32) (i32.const 60000))
    (func (export "k32_handle") (param i32 i32) (result i64) (local $i i32)
      (call $l (i32.const 0) (i32.const 20000))
      (loop $more (call $l (i32.const 0) (i32.const 1)) (br_if $more (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1))) (i32.const 5000))))
      (i64.const 0)))`));
  const lines: string[] = [];
  const pod = await startPod(mod, { onLog: (e) => lines.push(e.line) });
  t.after(() => pod.terminate());
  const dropped = (l: string): boolean => /^kube32: \d+ log lines dropped \(more than 1000 a second\)$/.test(l);
  const t0 = performance.now();
  await pod.handle(get('/'));
  const callMs = performance.now() - t0;
  assert.match(lines[0]!, /… \(3616 more bytes cut\)$/);
  // A token bucket: 1000 at once, then 1000 a second for as long as the loop ran, at most the call's
  // time. (A fixed bound of 1500 lines held only while the loop took under half a second: a loaded
  // machine stretched it to 424 ms, and 1391 lines passed.)
  const passed = lines.filter((l) => !dropped(l)).length;
  assert.ok(passed <= 1000 + Math.ceil(callMs) + 1, `${passed} of 5001 lines passed on in a call of ${callMs.toFixed(0)} ms`);
  // The next line let through after the flood reports how many were dropped.
  await until(async () => {
    await pod.handle(get('/'));
    return lines.some(dropped);
  });
});
