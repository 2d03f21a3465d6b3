/**
 * A restore prepared ahead of its pod (`PodInstance.prepareRestore`, issue 26 "Faster moves", see
 * docs/wasm-runtime.md): the snapshot is written into a pod thread while its chunks arrive, nothing of
 * the pod runs before the commit, and the commit gives the container's options (its fs directory
 * among them); a commit that does not fit, a cancel or a refused snapshot leave nothing running.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { loadModule, PodInstance, PodStartError, type PodModule } from '../../src/wasm/index.ts';
import { get, snapshotBytes, startPod, stateNumbers, tempDir, wat } from './helpers.ts';

const STATE = wat('state.wat');
let stateModule: Promise<PodModule> | undefined;
const stateMod = (): Promise<PodModule> => (stateModule ??= loadModule(STATE, { memoryLimitBytes: 1 << 20 }));

/** A source of restore chunks that the test feeds one at a time (`give`), then ends (`end`). */
function feed(): { source: AsyncIterable<Uint8Array>; give: (b: Uint8Array) => void; end: () => void } {
  const queue: (Uint8Array | null)[] = [];
  let wake: (() => void) | undefined;
  return {
    source: (async function* () {
      for (;;) {
        while (queue.length === 0) await new Promise<void>((r) => { wake = r; });
        const b = queue.shift()!;
        if (b === null) return;
        yield b;
      }
    })(),
    give: (b) => {
      queue.push(b);
      wake?.();
    },
    end: () => {
      queue.push(null);
      wake?.();
    },
  };
}

/** A pod of state.wat that answered 3 requests, frozen, and its snapshot. */
async function snapshotOfThree(t: { after: (f: () => unknown) => void }): Promise<Uint8Array> {
  const src = await startPod(await stateMod());
  t.after(() => src.terminate());
  for (let i = 0; i < 3; i++) await src.handle(get('/x'));
  await src.freeze();
  return snapshotBytes(src);
}

test('a prepared restore writes the snapshot as it arrives and runs nothing of the pod before its commit', { timeout: 30_000 }, async (t) => {
  const bytes = await snapshotOfThree(t);
  const logsBefore: string[] = [];
  const f = feed();
  const prepared = await PodInstance.prepareRestore({
    module: await stateMod(), namespace: 'test', podName: 'p', containerName: 'c', restoreFrom: f.source,
    onLog: (e) => logsBefore.push(e.line),
  });
  let restored = false;
  void prepared.restored.then(() => { restored = true; });
  const half = Math.floor(bytes.length / 2);
  f.give(bytes.slice(0, half));
  // The chunk is read (the thread checks the header and asks for more) but the snapshot is not whole.
  await new Promise((r) => setImmediate(r));
  assert.equal(restored, false, 'not restored before its last byte');
  f.give(bytes.slice(half));
  f.end();
  await prepared.restored;
  assert.deepEqual(logsBefore, [], 'k32_restored has not run: nothing of the pod runs before the commit');

  const fs = tempDir('prepared');
  t.after(fs.remove);
  const logsAfter: string[] = [];
  const pod = await prepared.commit({
    module: await stateMod(), namespace: 'test', podName: 'p', containerName: 'c', fsDir: join(fs.dir, 'c'),
    onLog: (e) => logsAfter.push(e.line),
  });
  t.after(() => pod.terminate());
  const n = stateNumbers(await pod.handle(get('/x')));
  assert.equal(n.requests, 4, 'counts on from the snapshot');
  assert.equal(n.restored, 1, 'k32_restored ran once, at the commit');
  assert.equal(n.inits, 1, 'k32_init ran only at the source');
  assert.ok(logsAfter.includes('restored'), `the commit's log sink gets k32_restored's line: ${JSON.stringify(logsAfter)}`);
  assert.deepEqual(logsBefore, [], "the prepare's log sink gets nothing");
  assert.ok(existsSync(join(fs.dir, 'c')), 'the fs directory given at the commit is made');
  await assert.rejects(prepared.commit({ module: await stateMod(), namespace: 'test', podName: 'p', containerName: 'c' }), /committed already/);
});

test('a commit that needs another environment is refused and ends the prepared pod; a cancel ends it too', { timeout: 30_000 }, async (t) => {
  const bytes = await snapshotOfThree(t);
  const mod = await stateMod();
  const a = await PodInstance.prepareRestore({ module: mod, namespace: 'test', podName: 'p', containerName: 'c', env: { A: '1' }, restoreFrom: (async function* () { yield bytes; })() });
  await a.restored;
  await assert.rejects(
    a.commit({ module: mod, namespace: 'test', podName: 'p', containerName: 'c', env: { A: '2' } }),
    (err: unknown) => err instanceof PodStartError && /does not fit the container: another environment/.test(err.message),
  );
  const b = await PodInstance.prepareRestore({ module: mod, namespace: 'test', podName: 'p', containerName: 'c', restoreFrom: (async function* () { yield bytes; })() });
  await b.restored;
  await b.cancel();
  await assert.rejects(
    b.commit({ module: mod, namespace: 'test', podName: 'p', containerName: 'c' }),
    (err: unknown) => err instanceof PodStartError && /the prepared restore was cancelled/.test(err.message),
    'a commit after the cancel is refused',
  );
});

test('a cancel after the commit ends nothing: the committed pod runs on and answers', { timeout: 30_000 }, async (t) => {
  const bytes = await snapshotOfThree(t);
  const mod = await stateMod();
  const prepared = await PodInstance.prepareRestore({ module: mod, namespace: 'test', podName: 'p', containerName: 'c', restoreFrom: (async function* () { yield bytes; })() });
  const pod = await prepared.commit({ module: mod, namespace: 'test', podName: 'p', containerName: 'c' });
  t.after(() => pod.terminate());
  assert.equal(stateNumbers(await pod.handle(get('/x'))).requests, 4);
  await prepared.cancel();
  let ended = false;
  void pod.exited.then(() => { ended = true; });
  assert.equal(stateNumbers(await pod.handle(get('/x'))).requests, 5, 'the committed pod still answers after the cancel, counting on');
  assert.equal(ended, false, 'the committed pod did not end');
});

test('a prepared restore of bytes that are not its snapshot fails with RestoreError; a module with a start function is not prepared', { timeout: 30_000 }, async (t) => {
  const bytes = await snapshotOfThree(t);
  const bad = Buffer.from(bytes);
  bad[bad.length - 1]! ^= 1; // the trailer no longer matches
  const mod = await stateMod();
  const p = await PodInstance.prepareRestore({ module: mod, namespace: 'test', podName: 'p', containerName: 'c', restoreFrom: (async function* () { yield bad; })() });
  await assert.rejects(p.restored, (err: unknown) => err instanceof PodStartError && err.reason === 'RestoreError');
  await assert.rejects(p.commit({ module: mod, namespace: 'test', podName: 'p', containerName: 'c' }), (err: unknown) => err instanceof PodStartError && err.reason === 'RestoreError');

  const withStart = await loadModule(wat(`(module (memory (export "memory") 1) (func $s) (start $s)
    (func (export "k32_alloc") (param i32) (result i32) (i32.const 16)) (func (export "k32_tick")))`));
  await assert.rejects(
    PodInstance.prepareRestore({ module: withStart, namespace: 'test', podName: 'p', containerName: 'c', restoreFrom: (async function* () { yield bytes; })() }),
    /start function/,
  );
});
