import assert from 'node:assert/strict';
import { test } from 'node:test';
import { slowStartBatch } from './slow-start.ts';

test('slowStartBatch makes its calls in batches of 1, 2, 4, … each batch at once', { timeout: 5000 }, async () => {
  let inFlight = 0;
  const batches: number[] = [];
  let current = 0;
  const outcome = await slowStartBatch(20, 1, async () => {
    inFlight++;
    current = Math.max(current, inFlight);
    await Promise.resolve();
    inFlight--;
    if (inFlight === 0) {
      batches.push(current);
      current = 0;
    }
  });
  assert.deepEqual(outcome, { successes: 20, skipped: 0 });
  assert.deepEqual(batches, [1, 2, 4, 8, 5]);
});

test('slowStartBatch stops after the first batch with a failure and says how many it skipped', { timeout: 5000 }, async () => {
  const made: number[] = [];
  const outcome = await slowStartBatch(100, 1, async (i) => {
    made.push(i);
    if (i === 5) throw new Error('quota exceeded');
  });
  // Batches 0 | 1-2 | 3-6: index 5 fails in the third, which still runs whole.
  assert.deepEqual(made, [0, 1, 2, 3, 4, 5, 6]);
  assert.equal(outcome.successes, 6);
  assert.equal(outcome.skipped, 93);
  assert.equal((outcome.error as Error).message, 'quota exceeded');
});

test('slowStartBatch with nothing to do makes no call; bad sizes are RangeErrors naming the option', async () => {
  assert.deepEqual(await slowStartBatch(0, 1, () => assert.fail('no call expected')), { successes: 0, skipped: 0 });
  await assert.rejects(slowStartBatch(-1, 1, async () => {}), /'count' must be an integer >= 0: current value is -1/);
  await assert.rejects(slowStartBatch(3, 0, async () => {}), /'initialBatchSize' must be an integer >= 1: current value is 0/);
});
