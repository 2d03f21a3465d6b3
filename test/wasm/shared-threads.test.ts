/**
 * Dense pods: many request pods on one shared worker thread (configurePodThreads, issue 11). What a
 * user of the runtime checks: pods on a shared thread serve, freeze, snapshot and restore as on a
 * thread of their own; a trap ends only its pod; a pod that runs past its call deadline stops its
 * thread, and its co-tenants end with reason Error and a message naming it; app pods keep a thread
 * of their own; 200 pods fit on 2 threads of 100 and all answer.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { configurePodThreads, drainWorkerPool, loadModule, PodCallError, PodInstance, PodStartError, podThreadCounts, podThreadSettings, type PodModule } from '../../src/wasm/index.ts';
import { body, decode, get, snapshotBytes, tempDir, wat } from './helpers.ts';

configurePodThreads({ podsPerThread: 100 });

/**
 * A request pod: answers a 4-digit count of its requests; `/l` loops forever, `/u` traps, `/b`
 * logs "busy" and then runs for 300 ms of its own clock; `/s` stores the request length at 70000
 * after growing memory (state that only a snapshot carries).
 */
const DENSE_WAT = `(module
  (import "k32" "k32_time_ms" (func $now (result i64)))
  (import "k32" "k32_log" (func $log (param i32 i32)))
  (memory (export "memory") 1 4)
  (global $n (mut i32) (i32.const 0))
  (global $f (mut f64) (f64.const 0))
  (data (i32.const 0) "HTTP/1.1 200 OK\\r\\ncontent-length: 4\\r\\n\\r\\n")
  (data (i32.const 100) "busy")
  (func (export "k32_alloc") (param i32) (result i32) (i32.const 4096))
  (func $digit (param $at i32) (param $v i32)
    (i32.store8 (local.get $at) (i32.add (i32.const 48) (i32.rem_u (local.get $v) (i32.const 10)))))
  (func (export "k32_handle") (param $p i32) (param $l i32) (result i64) (local $c i32) (local $t i64)
    (local.set $c (i32.load8_u (i32.add (local.get $p) (i32.const 5))))
    (if (i32.eq (local.get $c) (i32.const 108)) (then (loop $forever (br $forever))))
    (if (i32.eq (local.get $c) (i32.const 117)) (then unreachable))
    (if (i32.eq (local.get $c) (i32.const 98)) (then
      (call $log (i32.const 100) (i32.const 4))
      (local.set $t (call $now))
      (loop $wait (br_if $wait (i64.lt_u (i64.sub (call $now) (local.get $t)) (i64.const 300))))))
    (if (i32.eq (local.get $c) (i32.const 115)) (then
      (drop (memory.grow (i32.const 1)))
      (i32.store (i32.const 70000) (local.get $l))))
    (global.set $n (i32.add (global.get $n) (i32.const 1)))
    (global.set $f (f64.add (global.get $f) (f64.const 0.5)))
    (call $digit (i32.const 41) (global.get $n))
    (call $digit (i32.const 40) (i32.div_u (global.get $n) (i32.const 10)))
    (call $digit (i32.const 39) (i32.div_u (global.get $n) (i32.const 100)))
    (call $digit (i32.const 38) (i32.div_u (global.get $n) (i32.const 1000)))
    (i64.shl (i64.const 42) (i64.const 32))))`;

/** A request pod whose k32_init never returns. */
const LOOP_INIT_WAT = `(module (memory (export "memory") 1)
  (func (export "k32_alloc") (param i32) (result i32) (i32.const 0))
  (func (export "k32_init") (loop $l (br $l)))
  (func (export "k32_handle") (param i32 i32) (result i64) (i64.const 0)))`;

/**
 * An app pod whose entry point never returns: it runs until terminated, so a request pod that answers
 * meanwhile cannot be on its thread, however slow the machine (an entry point of 1500 ms had returned
 * before a loaded machine had started the request pod's thread).
 */
const APP_WAT = '(module (func (export "_start") (loop $forever (br $forever))))';

let denseModule: Promise<PodModule> | undefined;
function dense(): Promise<PodModule> {
  denseModule ??= loadModule(wat(DENSE_WAT), { memoryLimitBytes: 4 * 65536 });
  return denseModule;
}

/** Starts a pod of `module` named `name`, terminated in `t.after`. */
async function start(t: { after: (f: () => unknown) => void }, name: string, opts: { module?: PodModule; callDeadlineMs?: number; onLog?: (line: string) => void; restoreFrom?: AsyncIterable<Uint8Array> } = {}): Promise<PodInstance> {
  const pod = await PodInstance.start({
    module: opts.module ?? (await dense()),
    namespace: 'test',
    podName: name,
    containerName: 'c',
    ...(opts.callDeadlineMs !== undefined ? { callDeadlineMs: opts.callDeadlineMs } : {}),
    ...(opts.onLog ? { onLog: (e) => opts.onLog!(e.line) } : {}),
    ...(opts.restoreFrom ? { restoreFrom: opts.restoreFrom } : {}),
  });
  t.after(() => pod.terminate());
  return pod;
}

/** The count a pod of DENSE_WAT answers. */
async function count(pod: PodInstance, path = '/x'): Promise<number> {
  return Number(body(await pod.handle(get(path))));
}

/** Resolves when `pod` logs `line`. */
function logged(line: string): { onLog: (l: string) => void; seen: Promise<void> } {
  const { promise, resolve } = Promise.withResolvers<void>();
  return { onLog: (l) => l === line && resolve(), seen: promise };
}

/** Shared threads holding pods now, by pod count, largest first. */
function sharedThreads(): number[] {
  return podThreadCounts().shared.filter((n) => n > 0).sort((a, b) => b - a);
}

test.after(() => drainWorkerPool());

test('configurePodThreads checks its option and reports it', () => {
  assert.deepEqual(podThreadSettings(), { podsPerThread: 100 });
  for (const bad of [0, 1.5, -1, 10_001, Number.NaN]) {
    assert.throws(() => configurePodThreads({ podsPerThread: bad }), (e: unknown) => e instanceof RangeError && /podsPerThread must be an integer from 1 to 10000: current value is/.test(e.message));
  }
  assert.deepEqual(podThreadSettings(), { podsPerThread: 100 }, 'a refused value changes nothing');
});

test('200 pods on 2 shared threads of 100 all answer, and each keeps its own state', { timeout: 60_000 }, async (t) => {
  const pods = await Promise.all(Array.from({ length: 200 }, (_, i) => start(t, `p${i}`)));
  assert.deepEqual(sharedThreads(), [100, 100]);
  assert.deepEqual(await Promise.all(pods.map((p) => count(p))), pods.map(() => 1));
  // Five requests at once to every pod: each pod answers 2 to 6, in order, whatever its co-tenants do.
  const answers = await Promise.all(pods.map((p) => Promise.all([count(p), count(p), count(p), count(p), count(p)])));
  assert.deepEqual(answers, pods.map(() => [2, 3, 4, 5, 6]));
  assert.equal(await count(pods[7]!), 7);
  assert.equal(await count(pods[150]!), 7);
  assert.equal(await count(pods[8]!), 7, 'a co-tenant\'s requests do not count in another pod');
  await Promise.all(pods.slice(0, 100).map((p) => p.terminate()));
  assert.deepEqual(sharedThreads(), [100], 'an emptied thread is ended, the other keeps its pods');
  assert.equal(await count(pods[199]!), 7);
});

test('a trap ends only its own pod; its co-tenants keep serving', { timeout: 30_000 }, async (t) => {
  const a = await start(t, 'a');
  const b = await start(t, 'b');
  const c = await start(t, 'c');
  assert.deepEqual(sharedThreads(), [3]);
  await assert.rejects(b.handle(get('/u')), (e: unknown) => e instanceof PodCallError && e.code === 'Trap');
  assert.equal((await b.exited).reason, 'Trap');
  assert.equal(await count(a), 1);
  assert.equal(await count(c), 1);
  assert.deepEqual(sharedThreads(), [2]);
  assert.equal(a.exit, undefined);
});

test('a pod that runs past its call deadline stops its shared thread; its co-tenants end with a message naming it', { timeout: 30_000 }, async (t) => {
  const loop = await start(t, 'loop', { callDeadlineMs: 200 });
  const b = await start(t, 'b');
  const c = await start(t, 'c');
  assert.equal(await count(b), 1);
  const overdue = once(loop, 'overdue');
  const call = loop.handle(get('/l')).catch((e: unknown) => e);
  assert.deepEqual((await overdue)[0], { name: 'k32_handle', ms: 200 });
  const own = await loop.exited;
  assert.equal(own.reason, 'Error');
  assert.match(own.message, /^call k32_handle still running after 200 ms: a pod on a shared thread cannot run past its call deadline, so its thread was stopped$/);
  const err = await call;
  assert.ok(err instanceof PodCallError && err.code === 'NotRunning');
  for (const pod of [b, c]) {
    const exit = await pod.exited;
    assert.equal(exit.reason, 'Error');
    assert.equal(exit.exitCode, 1);
    assert.match(exit.message, /^the shared thread was stopped: pod test\/loop \(container c\) ran past its call deadline \(call k32_handle still running after 200 ms\)/);
    await assert.rejects(pod.handle(get('/x')), (e: unknown) => e instanceof PodCallError && e.code === 'NotRunning');
  }
  // A new pod goes to a new thread and serves.
  const d = await start(t, 'd');
  assert.equal(await count(d), 1);
  assert.deepEqual(sharedThreads(), [1]);
});

test('a pod restarted the moment its call ran past its deadline (as the kubelet does) starts on a new thread and keeps its own message; only the co-tenants get the stopped thread\'s', { timeout: 30_000 }, async (t) => {
  const loop = await start(t, 'loop', { callDeadlineMs: 200 });
  const b = await start(t, 'b');
  assert.deepEqual(sharedThreads(), [2]);
  // The kubelet's restart policy starts the container again as soon as its exit is reported: the
  // new pod must not join the thread whose runaway code is about to be stopped with it.
  const again = new Promise<PodInstance>((resolve, reject) => {
    loop.once('exit', () => void start(t, 'loop').then(resolve, reject));
  });
  void loop.handle(get('/l')).catch(() => {});
  const own = await loop.exited;
  assert.match(own.message, /^call k32_handle still running after 200 ms: a pod on a shared thread cannot run past its call deadline/);
  assert.ok(own.finishedAt >= Date.now() - 5_000);
  const restarted = await again;
  assert.equal(await count(restarted), 1, 'the restarted pod serves');
  const exit = await b.exited;
  assert.match(exit.message, /^the shared thread was stopped: pod test\/loop \(container c\) ran past its call deadline/);
  assert.equal(restarted.exit, undefined, 'the restarted pod is not ended with the stopped thread');
  assert.equal(await count(restarted), 2);
  assert.deepEqual(sharedThreads(), [1]);
});

test('a k32_init that never returns fails its start as on a thread of its own and ends its co-tenants', { timeout: 30_000 }, async (t) => {
  const b = await start(t, 'b');
  const looping = await loadModule(wat(LOOP_INIT_WAT));
  await assert.rejects(start(t, 'init-loop', { module: looping, callDeadlineMs: 200 }), (e: unknown) => {
    assert.ok(e instanceof PodStartError);
    assert.equal(e.reason, 'Error');
    assert.equal(e.message, 'call k32_init still running after 200 ms');
    return true;
  });
  const exit = await b.exited;
  assert.equal(exit.reason, 'Error');
  assert.match(exit.message, /^the shared thread was stopped: pod test\/init-loop \(container c\) ran past its call deadline \(call k32_init still running after 200 ms\)/);
});

test('a call deadline counts the pod\'s own run, not the time its call waits behind a busy co-tenant', { timeout: 30_000 }, async (t) => {
  const busy = logged('busy');
  const a = await start(t, 'a', { onLog: busy.onLog });
  const b = await start(t, 'b', { callDeadlineMs: 100 });
  assert.deepEqual(sharedThreads(), [2]);
  let bOverdue = false;
  b.on('overdue', () => {
    bOverdue = true;
  });
  const aCall = count(a, '/b');
  await busy.seen; // a's code runs now, for 300 ms
  const t0 = performance.now();
  assert.equal(await count(b), 1);
  assert.ok(performance.now() - t0 >= 100, 'b waited behind a for longer than its own deadline');
  assert.equal(await aCall, 1);
  assert.equal(bOverdue, false);
  assert.equal(b.exit, undefined);
  assert.equal(await count(b), 2);
});

test('freeze while a call is queued behind a co-tenant: the call answers, then the pod freezes; its snapshot restores on the shared thread field by field', { timeout: 30_000 }, async (t) => {
  const busy = logged('busy');
  const a = await start(t, 'a', { onLog: busy.onLog });
  const b = await start(t, 'b');
  assert.equal(await count(b, '/s'), 1);
  assert.equal(await count(b), 2);
  const aCall = count(a, '/b');
  await busy.seen;
  const queued = count(b);
  const frozen = b.freeze(5000);
  assert.equal(await queued, 3, 'the call queued before the freeze answers');
  await frozen;
  assert.equal(b.frozen, true);
  assert.equal(await aCall, 1);
  const bytes = await snapshotBytes(b);
  // The restored pod joins the same thread, beside a and b.
  const r = await start(t, 'b-restored', { restoreFrom: (async function* () { yield bytes; })() });
  assert.deepEqual(sharedThreads(), [3]);
  await r.freeze();
  const again = await snapshotBytes(r);
  const [A, B] = [await decode(bytes), await decode(again)];
  assert.equal(B.header.memoryPages, A.header.memoryPages);
  assert.equal(A.header.memoryPages, 2, 'the page grown at run time');
  assert.deepEqual(B.memory, A.memory, 'memory byte for byte (the request length at 70000 included)');
  assert.deepEqual(B.globals, A.globals, 'every mutable global, the f64 by its bits');
  assert.deepEqual(B.tables, A.tables);
  assert.deepEqual(B.channels, A.channels);
  assert.ok(B.header.podTimeMs >= A.header.podTimeMs, 'the clock carries over, never backward');
  assert.equal(new DataView(A.memory!.buffer, A.memory!.byteOffset).getUint32(70000, true), get('/s').length);
  await r.thaw();
  assert.equal(await count(r), 4, 'the count goes on from the snapshot');
  await b.thaw();
  assert.equal(await count(b), 4);
  assert.equal(await count(a), 2, 'the co-tenant was never touched');
});

test('terminating a pod in the middle of a call frees it without touching its co-tenants', { timeout: 30_000 }, async (t) => {
  const busy = logged('busy');
  const a = await start(t, 'a', { onLog: busy.onLog, callDeadlineMs: 2000 });
  const b = await start(t, 'b');
  const aCall = a.handle(get('/b')).catch((e: unknown) => e);
  await busy.seen;
  assert.equal((await a.terminate()).reason, 'Completed');
  const err = await aCall;
  assert.ok(err instanceof PodCallError && err.code === 'NotRunning');
  assert.equal(await count(b), 1, 'b answers once a\'s call has returned');
  assert.deepEqual(sharedThreads(), [1]);
  assert.equal(b.exit, undefined);
});

test('a pod terminated while its looping call waits behind a co-tenant never runs it: the thread and its other pods go on', { timeout: 30_000 }, async (t) => {
  const busy = logged('busy');
  const a = await start(t, 'a', { onLog: busy.onLog });
  const loop = await start(t, 'loop', { callDeadlineMs: 200 });
  const c = await start(t, 'c');
  const aCall = count(a, '/b');
  await busy.seen;
  const looping = loop.handle(get('/l')).catch((e: unknown) => e);
  await loop.terminate();
  assert.ok((await looping) instanceof PodCallError);
  assert.equal(await aCall, 1);
  assert.equal(await count(c), 1, 'the thread is not stuck in the terminated pod\'s loop');
  assert.equal(await count(a), 2);
  assert.deepEqual(sharedThreads(), [2]);
  assert.equal(c.exit, undefined);
});

test('a start cancelled while the thread is busy never runs the pod\'s k32_init (one that loops cannot take the thread)', { timeout: 30_000 }, async (t) => {
  const busy = logged('busy');
  const a = await start(t, 'a', { onLog: busy.onLog });
  const looping = await loadModule(wat(LOOP_INIT_WAT));
  const aCall = count(a, '/b');
  await busy.seen;
  const ac = new AbortController();
  const starting = PodInstance.start({ module: looping, namespace: 'test', podName: 'cancelled', containerName: 'c', callDeadlineMs: 60_000, signal: ac.signal });
  setImmediate(() => ac.abort());
  await assert.rejects(starting, (e: unknown) => e instanceof PodStartError && e.message === 'the start was cancelled');
  assert.equal(await aCall, 1);
  assert.equal(await count(a), 2, 'the thread is not stuck in the cancelled pod\'s k32_init');
  assert.equal(a.exit, undefined);
});

test('a pod whose start fails on the thread (its fsDir cannot be made) fails alone', { timeout: 30_000 }, async (t) => {
  const a = await start(t, 'a');
  const dir = tempDir('dense-fs');
  t.after(dir.remove);
  const file = join(dir.dir, 'a-file');
  writeFileSync(file, 'x');
  await assert.rejects(
    PodInstance.start({ module: await dense(), namespace: 'test', podName: 'bad-fs', containerName: 'c', fsDir: join(file, 'sub') }),
    (e: unknown) => e instanceof PodStartError && e.reason === 'Error' && /^cannot start the pod: ENOTDIR/.test(e.message),
  );
  assert.equal(await count(a), 1);
  assert.deepEqual(sharedThreads(), [1]);
});

test('an app pod gets a thread of its own even with dense pods', { timeout: 30_000 }, async (t) => {
  const app = await start(t, 'app', { module: await loadModule(wat(APP_WAT)) });
  const b = await start(t, 'b');
  assert.deepEqual(sharedThreads(), [1], 'the app pod is not on a shared thread');
  assert.equal(await count(b), 1);
  assert.equal(app.exit, undefined, 'b answered while the app\'s entry point still ran');
  assert.equal((await app.terminate()).reason, 'Completed');
});
