/**
 * The pod runtime under bad input: malformed modules (random damage to real ones), hostile pods
 * (a start function or k32_init that never returns, traps at start, huge allocations), a start
 * cancelled by its caller, and the pod clock of a worker that waited in the pool.
 */
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import fc from 'fast-check';
import { ModuleError, PodStartError, loadModule, warmWorkerPool } from '../../src/wasm/index.ts';
import { body, example, get, startPod, tempDir, wat } from './helpers.ts';

const BASE = `
  (import "k32" "k32_log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (func (export "k32_alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "k32_handle") (param i32 i32) (result i64) (i64.or (i64.const 100) (i64.shl (i64.const 2) (i64.const 32))))`;

test('damaged modules are refused with a ModuleError or load; nothing else escapes', { timeout: 60_000 }, async () => {
  const originals = [example('echo'), example('counter-c'), wat(`(module ${BASE} (global (mut f64) (f64.const 1)) (table 2 funcref))`)];
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 0, max: originals.length - 1 }),
      fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 }),
      fc.option(fc.nat(), { nil: undefined }),
      async (which, edits, cut) => {
        const bytes = new Uint8Array(originals[which]!);
        for (const [at, v] of edits) bytes[at % bytes.length] = v;
        const damaged = cut === undefined ? bytes : bytes.subarray(0, cut % bytes.length);
        try {
          await loadModule(damaged, { memoryLimitBytes: 1 << 20 });
        } catch (err: unknown) {
          assert.ok(err instanceof ModuleError, `not a ModuleError: ${(err as Error)?.stack ?? String(err)}`);
          assert.ok(err.message.length > 0);
        }
      },
    ),
    { numRuns: 1000, seed: 1203 },
  );
});

test('a start function or k32_init that never returns fails the start after callDeadlineMs; the worker ends', { timeout: 30_000 }, async () => {
  const initLoop = await loadModule(wat(`(module ${BASE} (func (export "k32_init") (loop $l (br $l))))`));
  // A booted thread waits for the pod, so the time bounded is the start's own, not a thread's boot and
  // warm-up (1.9-2.7 s of the 5 s on a machine with four CPU burners; 0.3-0.65 s with a thread ready).
  await warmWorkerPool();
  const t0 = performance.now();
  await assert.rejects(startPod(initLoop, { callDeadlineMs: 300 }), (e: unknown) => {
    assert.ok(e instanceof PodStartError);
    assert.equal(e.reason, 'Error');
    assert.equal(e.message, 'call k32_init still running after 300 ms');
    return true;
  });
  assert.ok(performance.now() - t0 < 5000);
  const startLoop = await loadModule(wat(`(module ${BASE} (func $s (loop $l (br $l))) (start $s))`));
  await assert.rejects(startPod(startLoop, { callDeadlineMs: 300 }), /instantiating the module \(its start function included\) still running after 300 ms/);
  // The node goes on: the next pod starts and answers.
  const ok = await startPod(await loadModule(wat(`(module ${BASE})`)));
  assert.equal((await ok.handle(get('/'))).length, 2);
  await ok.terminate();
});

test('a start cancelled through its signal ends the worker and rejects', { timeout: 30_000 }, async () => {
  const initLoop = await loadModule(wat(`(module ${BASE} (func (export "k32_init") (loop $l (br $l))))`));
  const ac = new AbortController();
  const started = startPod(initLoop, { signal: ac.signal });
  ac.abort();
  await assert.rejects(started, /the start was cancelled/);
  await assert.rejects(startPod(initLoop, { signal: AbortSignal.abort() }), /the start was cancelled/);
});

test('a trap in k32_init, or a huge memory.grow, is contained', { timeout: 30_000 }, async (t) => {
  const trap = await loadModule(wat(`(module ${BASE} (func (export "k32_init") unreachable))`));
  await assert.rejects(startPod(trap), (e: unknown) => e instanceof PodStartError && e.reason === 'Trap' && /k32_init: unreachable/.test(e.message));
  // memory.grow past the limit fails inside WebAssembly (-1); the pod keeps running.
  const grow = await loadModule(
    wat(`(module
      (memory (export "memory") 1)
      (data (i32.const 0) "HTTP/1.1 200 OK\\r\\ncontent-length: 1\\r\\n\\r\\n")
      (func (export "k32_alloc") (param i32) (result i32) (i32.const 1024))
      (func (export "k32_handle") (param i32 i32) (result i64)
        (i32.store8 (i32.const 38) (i32.add (i32.const 0x30) (i32.eq (memory.grow (i32.const 60000)) (i32.const -1))))
        (i64.or (i64.const 0) (i64.shl (i64.const 39) (i64.const 32)))))`),
    { memoryLimitBytes: 1 << 20 },
  );
  const pod = await startPod(grow);
  t.after(() => pod.terminate());
  assert.equal(body(await pod.handle(get('/'))), '1', 'memory.grow past the limit returned -1');
  assert.equal(pod.exit, undefined);
});

test('the pod clock starts at the pod\'s start, not when its worker was booted ahead of need', { timeout: 30_000 }, async (t) => {
  await warmWorkerPool();
  await delay(600); // the spare worker waits: this time must not count as the pod's
  const module = await loadModule(wat(`(module ${BASE})`));
  // The pod's clock at start is at most the time its start took, however slow the machine is.
  const t0 = performance.now();
  const pod = await startPod(module);
  const podTimeMs = pod.podTimeMs;
  const startMs = performance.now() - t0;
  t.after(() => pod.terminate());
  assert.ok(podTimeMs <= startMs + 1, `pod time at start: ${podTimeMs} ms, the start took ${startMs.toFixed(1)} ms (the 600 ms the worker waited do not count)`);
});

test('fsLimitBytes: a write past the pod\'s storage quota answers -ENOSPC and writes nothing; what was there counts', { timeout: 30_000 }, async (t) => {
  const tmp = tempDir('fs-quota');
  t.after(tmp.remove);
  // Each request appends 60000 bytes to "f" twice; the body says whether the first write was whole
  // and the second refused with -28.
  const mod = await loadModule(wat(`(module
    (import "k32" "k32_fs_open" (func $open (param i32 i32 i32) (result i32)))
    (import "k32" "k32_fs_write" (func $write (param i32 i32 i32) (result i32)))
    (import "k32" "k32_fs_close" (func $close (param i32) (result i32)))
    (memory (export "memory") 1)
    (data (i32.const 0) "f")
    (data (i32.const 16) "HTTP/1.1 200 OK\\r\\ncontent-length: 2\\r\\n\\r\\n")
    (func (export "k32_alloc") (param i32) (result i32) (i32.const 62000))
    (func (export "k32_handle") (param i32 i32) (result i64) (local $fd i32) (local $a i32) (local $b i32)
      (local.set $fd (call $open (i32.const 0) (i32.const 1) (i32.const 2)))
      (local.set $a (call $write (local.get $fd) (i32.const 1024) (i32.const 60000)))
      (local.set $b (call $write (local.get $fd) (i32.const 1024) (i32.const 60000)))
      (drop (call $close (local.get $fd)))
      (i32.store8 (i32.const 54) (i32.add (i32.const 48) (i32.eq (local.get $a) (i32.const 60000))))
      (i32.store8 (i32.const 55) (i32.add (i32.const 48) (i32.eq (local.get $b) (i32.const -28))))
      (i64.or (i64.const 16) (i64.shl (i64.const 40) (i64.const 32)))))`));
  const pod = await startPod(mod, { fsDir: tmp.dir, fsLimitBytes: 100_000 });
  t.after(() => pod.terminate());
  assert.equal(body(await pod.handle(get('/'))), '11');
  assert.equal(statSync(join(tmp.dir, 'f')).size, 60_000);
  await pod.terminate();
  // A new container on the same storage: the 60000 bytes already there count.
  const again = await startPod(mod, { fsDir: tmp.dir, fsLimitBytes: 100_000 });
  t.after(() => again.terminate());
  assert.equal(body(await again.handle(get('/'))), '01', 'the first write is refused too');
  assert.equal(statSync(join(tmp.dir, 'f')).size, 60_000);
  await assert.rejects(startPod(mod, { fsDir: tmp.dir, fsLimitBytes: -1 }), RangeError);
});

test('a log flood followed by silence still reports every dropped line', { timeout: 30_000 }, async (t) => {
  const mod = await loadModule(wat(`(module (import "k32" "k32_log" (func $l (param i32 i32))) (memory (export "memory") 1)
    (func (export "k32_alloc") (param i32) (result i32) (i32.const 60000))
    (func (export "k32_handle") (param i32 i32) (result i64) (local $i i32)
      (loop $more (call $l (i32.const 0) (i32.const 1)) (br_if $more (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1))) (i32.const 5000))))
      (i64.const 0)))`));
  // Lines passed on plus lines reported dropped reach the 5000 written, with no further call.
  let passed = 0;
  let dropped = 0;
  const all = Promise.withResolvers<void>();
  const pod = await startPod(mod, {
    onLog: (e) => {
      const m = /^kube32: (\d+) log lines? dropped \(more than 1000 a second\)$/.exec(e.line);
      if (m) dropped += Number(m[1]);
      else passed++;
      if (passed + dropped === 5000) all.resolve();
    },
  });
  t.after(() => pod.terminate());
  await pod.handle(get('/'));
  await all.promise;
  assert.ok(dropped > 0);
});

test('tables are bounded: a module with millions of initial entries is refused, a table.grow past the bound fails inside WebAssembly', { timeout: 30_000 }, async (t) => {
  await assert.rejects(loadModule(wat(`(module ${BASE} (table 10000000 funcref))`)), (e: unknown) => {
    assert.ok(e instanceof ModuleError);
    assert.equal(e.code, 'Unsupported');
    assert.equal(e.message, `table 0 has 10000000 initial entries, more than a pod's table may have (${1 << 20})`);
    return true;
  });
  // The body says whether table.grow by nine million entries returned -1.
  const grow = await loadModule(wat(`(module (memory (export "memory") 1) (table $t 1 funcref)
    (data (i32.const 0) "HTTP/1.1 200 OK\\r\\ncontent-length: 1\\r\\n\\r\\n")
    (func (export "k32_alloc") (param i32) (result i32) (i32.const 100))
    (func (export "k32_handle") (param i32 i32) (result i64)
      (i32.store8 (i32.const 38) (i32.add (i32.const 48) (i32.eq (table.grow $t (ref.null func) (i32.const 9000000)) (i32.const -1))))
      (i64.const 0x2700000000)))`));
  const pod = await startPod(grow);
  t.after(() => pod.terminate());
  assert.equal(body(await pod.handle(get('/'))), '1');
  assert.equal(pod.exit, undefined, 'the pod keeps running');
});

test('a module with more mutable globals than a pod may have is refused before it costs the node', { timeout: 30_000 }, async () => {
  const globals = Array.from({ length: 65_537 }, () => '(global (mut i32) (i32.const 0))').join('');
  const bytes = wat(`(module ${BASE} ${globals})`);
  // The refusal's own time: wat2wasm building the 2 MB text (seconds on a loaded machine) is the test's.
  const t0 = performance.now();
  await assert.rejects(loadModule(bytes), (e: unknown) => {
    assert.ok(e instanceof ModuleError);
    assert.equal(e.message, 'the module has 65537 mutable globals, more than a pod may have (65536)');
    return true;
  });
  assert.ok(performance.now() - t0 < 10_000);
});
