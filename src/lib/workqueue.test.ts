import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ManualClock, WorkQueue, clampDelay } from './workqueue.ts';

test('duplicates collapse: a key added twice is handed out once', { timeout: 5000 }, async () => {
  const q = new WorkQueue<string>();
  q.add('a');
  q.add('b');
  q.add('a');
  assert.equal(q.length, 2);
  assert.equal(await q.get(), 'a');
  assert.equal(await q.get(), 'b');
  assert.equal(q.length, 0);
});

test('no two workers hold one key; a key added while processed runs again after done()', { timeout: 5000 }, async () => {
  const q = new WorkQueue<string>();
  q.add('a');
  const first = await q.get();
  assert.equal(first, 'a');
  q.add('a'); // while processing
  assert.equal(q.length, 0, 'not handed to a second worker');
  const second = q.get();
  let got: string | undefined;
  void second.then((k) => {
    got = k;
  });
  await Promise.resolve();
  assert.equal(got, undefined);
  q.done('a');
  assert.equal(await second, 'a');
  q.done('a');
  assert.equal(q.length, 0);
});

test('a waiting get() is woken by add()', { timeout: 5000 }, async () => {
  const q = new WorkQueue<string>();
  const p = q.get();
  q.add('x');
  assert.equal(await p, 'x');
});

test('addAfter queues later and the earliest pending time wins', { timeout: 5000 }, () => {
  const clock = new ManualClock(0);
  const q = new WorkQueue<string>({ clock });
  q.addAfter('a', 1000);
  q.addAfter('a', 300);
  q.addAfter('a', 5000);
  assert.equal(clock.pendingTimers, 1);
  clock.advance(299);
  assert.equal(q.length, 0);
  clock.advance(1);
  assert.equal(q.length, 1);
  clock.advance(10_000);
  assert.equal(q.length, 1, 'the replaced timers do not fire');
});

test('addRateLimited backs off 5 ms doubling, capped, and forget() resets it', { timeout: 5000 }, async () => {
  const clock = new ManualClock(0);
  const q = new WorkQueue<string>({ clock, baseDelayMs: 5, maxDelayMs: 40 });
  const delays: number[] = [];
  for (let i = 0; i < 6; i++) {
    const start = clock.now();
    q.addRateLimited('k');
    let waited = 0;
    while (q.length === 0) {
      clock.advance(1);
      waited++;
    }
    delays.push(waited);
    assert.equal(clock.now() - start, waited);
    assert.equal(await q.get(), 'k');
    q.done('k');
  }
  assert.deepEqual(delays, [5, 10, 20, 40, 40, 40]);
  assert.equal(q.numRequeues('k'), 6);
  q.forget('k');
  assert.equal(q.numRequeues('k'), 0);
});

test('shutDown wakes waiters with undefined and drops later adds', { timeout: 5000 }, async () => {
  const clock = new ManualClock(0);
  const q = new WorkQueue<string>({ clock });
  const p = q.get();
  q.addAfter('later', 100);
  q.shutDown();
  assert.equal(await p, undefined);
  q.add('b');
  assert.equal(await q.get(), undefined);
  assert.equal(clock.pendingTimers, 0);
});

test('delays are clamped to Node timer ceiling', () => {
  assert.equal(clampDelay(2 ** 40), 2_147_483_647);
  assert.equal(clampDelay(-5), 0);
  assert.equal(clampDelay(Number.NaN), 0);
});

test('bad options are refused with a RangeError naming the option', () => {
  assert.throws(() => new WorkQueue({ baseDelayMs: -1 }), /baseDelayMs/);
  assert.throws(() => new WorkQueue({ baseDelayMs: 10, maxDelayMs: 5 }), /maxDelayMs/);
});
