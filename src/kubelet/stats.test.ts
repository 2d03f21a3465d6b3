import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatWindow, MIN_RATE_WINDOW_MS, UsageRates } from './stats.ts';

test('a rate leaves the container\'s start out: it is measured from the counter as the start returned', () => {
  const rates = new UsageRates();
  // 100 ms of compile and instantiate before the start returned at t=1000; idle afterwards.
  rates.begin('c', 1_000, 100e6);
  assert.equal(rates.rate('c', 100.02e6, 1_500), undefined, 'no rate over less than a second');
  const r = rates.rate('c', 100.05e6, 2_100);
  assert.deepEqual(r, { nanoCores: Math.round((0.05e6 / 1_100) * 1000), windowMs: 1_100 });
});

test('a rate is over the newest sample at least a second old, never longer than the samples allow', () => {
  const rates = new UsageRates();
  rates.begin('c', 0, 0);
  assert.equal(rates.rate('c', 1e9, 10_000)?.windowMs, 10_000); // a housekeeping sample
  // Read 0.5 s after it: measured from the start sample (the newer one is too young).
  assert.deepEqual(rates.rate('c', 1.25e9, 10_500), { nanoCores: Math.round(1.25e9 / 10.5), windowMs: 10_500 });
  // 1.2 s after it: from the housekeeping sample at 10 s, not from the start.
  assert.deepEqual(rates.rate('c', 1.6e9, 11_200), { nanoCores: 0.5e9, windowMs: 1_200 });
  assert.ok(MIN_RATE_WINDOW_MS <= 1_200);
});

test('a counter without a start sample has no rate; a reading that went back is no sample', () => {
  const rates = new UsageRates();
  assert.equal(rates.rate('x', 5, 10_000), undefined);
  rates.begin('c', 0, 0);
  rates.rate('c', 2e9, 2_000);
  // A reading taken before the last one landed after it (two requests at once): not a sample.
  rates.rate('c', 1e9, 1_900);
  assert.deepEqual(rates.rate('c', 3e9, 3_000), { nanoCores: 1e9, windowMs: 1_000 });
  rates.keep(new Set());
  assert.equal(rates.has('c'), false);
});

test('a window is written as Go writes a duration', () => {
  assert.equal(formatWindow(1_000), '1s');
  assert.equal(formatWindow(2_513), '2.513s');
  assert.equal(formatWindow(2_500), '2.5s');
  assert.equal(formatWindow(65_200), '1m5.2s');
  assert.equal(formatWindow(60_000), '1m0s');
});
