/**
 * The pod threads' warm-up (src/wasm/warm-up.ts): it runs its small pod through a start, a freeze, a
 * snapshot with its digest and a restore without error, and a booted pod thread reports `booted`
 * without a `warmUpError` (a failed warm-up is reported there, and the thread serves pods anyway).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Worker } from 'node:worker_threads';
import { warmUpPodCode, warmUpSnapshotCode } from '../../src/wasm/warm-up.ts';

test('the warm-up writes and reads back its snapshot and moves its pod', { timeout: 10_000 }, async () => {
  warmUpSnapshotCode();
  await warmUpPodCode();
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
