/**
 * The pod threads' warm-up (src/wasm/warm-up.ts): it runs, before any pod, every function a move runs on
 * a pod thread (V8's call counts say so: the K32S writer, reader and digest, a start, a snapshot and a
 * restore), again without error, and a booted pod thread reports `booted` without a `warmUpError` (a
 * failed warm-up is reported there, and the thread serves pods anyway).
 */
import assert from 'node:assert/strict';
import { Session } from 'node:inspector/promises';
import { test } from 'node:test';
import { Worker } from 'node:worker_threads';

/** The functions a move runs on a pod thread (`file:function` below src/), which the warm-up must have run first. */
const MOVE_CODE = [
  'k32s/encode.ts:encodeSnapshot',
  'k32s/encode.ts:snapshotByteLength',
  'k32s/encode.ts:snapshotSha256',
  'k32s/decode.ts:SnapshotDecoder',
  'k32s/decode.ts:push',
  'k32s/decode.ts:end',
  'wasm/pod-context.ts:start',
  'wasm/pod-context.ts:#snapshot',
  'wasm/pod-context.ts:#snapshotNext',
  'wasm/pod-context.ts:#restore',
  'wasm/pod-context.ts:#onRestoreMessage',
];

test('the warm-up runs, in its isolate, the code a move runs: the K32S writer, reader and digest, a start, a snapshot and a restore', { timeout: 20_000 }, async (t) => {
  // V8's call counts of this isolate (the warm-up's purpose: V8 compiles a function when it first runs,
  // and without the warm-up a pod's first move paid for it). Started before the warm-up's code loads.
  const session = new Session();
  session.connect();
  t.after(() => session.disconnect());
  await session.post('Profiler.enable');
  await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: false });
  const calls = async (): Promise<Map<string, number>> => {
    const { result } = await session.post('Profiler.takePreciseCoverage');
    const m = new Map<string, number>();
    for (const script of result) {
      const file = /\/src\/((?:k32s|wasm)\/[^/]+\.ts)$/.exec(script.url)?.[1];
      if (!file) continue;
      for (const f of script.functions) m.set(`${file}:${f.functionName}`, (m.get(`${file}:${f.functionName}`) ?? 0) + (f.ranges[0]?.count ?? 0));
    }
    return m;
  };
  const { warmUpPodCode, warmUpSnapshotCode } = await import('../../src/wasm/warm-up.ts');
  const before = await calls();
  for (const fn of MOVE_CODE) assert.equal(before.get(fn) ?? 0, 0, `${fn} has not run before the warm-up`);
  warmUpSnapshotCode();
  await warmUpPodCode();
  const after = await calls();
  for (const fn of MOVE_CODE) assert.ok((after.get(fn) ?? 0) > 0, `the warm-up ran ${fn}`);
  // Twice: it leaves nothing behind that a second run would trip on.
  await warmUpPodCode();
});

test('a pod thread boots after its warm-up, which reports no error', { timeout: 20_000 }, async (t) => {
  const worker = new Worker(new URL('../../src/wasm/worker.ts', import.meta.url), { workerData: { status: new SharedArrayBuffer(16) } });
  t.after(() => worker.terminate());
  const first = await new Promise<unknown>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  assert.deepEqual(first, { op: 'booted' });
});
