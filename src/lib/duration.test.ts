import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseDuration, humanDuration } from './duration.ts';

test('parseDuration reads the units the seeds and Kubernetes write', () => {
  assert.equal(parseDuration('500ms'), 500);
  assert.equal(parseDuration('60s'), 60_000);
  assert.equal(parseDuration('1m30s'), 90_000);
  assert.equal(parseDuration('1.5s'), 1500);
  assert.equal(parseDuration('2h'), 7_200_000);
});

test('parseDuration refuses a bare number and junk with a RangeError naming the text', () => {
  assert.throws(() => parseDuration('10'), /invalid duration "10"/);
  assert.throws(() => parseDuration('ten seconds'), RangeError);
  assert.throws(() => parseDuration(''), RangeError);
});

test('humanDuration prints ages as kubectl does', () => {
  assert.equal(humanDuration(45_000), '45s');
  assert.equal(humanDuration(150_000), '2m30s');
  assert.equal(humanDuration(12 * 60_000), '12m');
  assert.equal(humanDuration(3 * 86_400_000), '3d');
});
