import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ManualClock } from '../../lib/index.ts';
import { quietLog } from '../testing/fakes.ts';
import { Controller, MAX_RETRIES } from './controller.ts';

test('handleResult: success forgets, requeueAfterMs queues later, errors back off and are dropped after MAX_RETRIES', () => {
  const clock = new ManualClock(0);
  const c = new Controller('t', async () => undefined, { clock, log: quietLog });
  c.handleResult('k', { requeueAfterMs: 1000 });
  clock.advance(999);
  assert.equal(c.queue.length, 0);
  clock.advance(1);
  assert.equal(c.queue.length, 1);
  for (let i = 0; i < MAX_RETRIES; i++) c.handleResult('e', undefined, new Error('boom'));
  assert.equal(c.queue.numRequeues('e'), MAX_RETRIES);
  c.handleResult('e', undefined, new Error('boom'));
  assert.equal(c.queue.numRequeues('e'), 0, 'dropped and forgotten');
  c.queue.shutDown();
});

test('workers reconcile each key, and a key added while it runs runs again afterwards', { timeout: 5000 }, async () => {
  const seen: string[] = [];
  let release!: () => void;
  const first = new Promise<void>((r) => {
    release = r;
  });
  const done = Promise.withResolvers<void>();
  const c = new Controller(
    't',
    async (key) => {
      seen.push(key);
      if (seen.length === 1) await first;
      if (seen.length === 2) done.resolve();
      return undefined;
    },
    { clock: new ManualClock(0), log: quietLog, workers: 2 },
  );
  c.start();
  c.enqueue('a');
  await new Promise((r) => setImmediate(r));
  c.enqueue('a'); // while processing
  release();
  await done.promise;
  assert.deepEqual(seen, ['a', 'a']);
  await c.stop();
});

test('maxRetries: Infinity keeps retrying at the back-off cap instead of dropping the key', () => {
  const clock = new ManualClock(0);
  const c = new Controller('t', async () => undefined, { clock, log: quietLog, maxRetries: Number.POSITIVE_INFINITY });
  for (let i = 0; i < MAX_RETRIES + 5; i++) c.handleResult('e', undefined, new Error('boom'));
  assert.equal(c.queue.numRequeues('e'), MAX_RETRIES + 5, 'never dropped');
  assert.throws(() => new Controller('t', async () => undefined, { clock, log: quietLog, maxRetries: -1 }), /'maxRetries' must be a number >= 0: current value is -1/);
  c.queue.shutDown();
});
