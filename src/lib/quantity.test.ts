import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseQuantity, parseBytes, formatBytes } from './quantity.ts';

test('parseQuantity reads binary and decimal suffixes and exponents', () => {
  assert.equal(parseQuantity('256Mi'), 256 * 2 ** 20);
  assert.equal(parseQuantity('64Ki'), 65536);
  assert.equal(parseQuantity('1G'), 1e9);
  assert.equal(parseQuantity('500m'), 0.5);
  assert.equal(parseQuantity('12e3'), 12000);
  assert.equal(parseBytes('1.5Ki'), 1536);
});

test('parseQuantity refuses what is not a quantity', () => {
  assert.throws(() => parseQuantity('12 MB'), /invalid quantity/);
  assert.throws(() => parseBytes('-1Mi'), /negative/);
});

test('formatBytes picks the largest exact binary suffix', () => {
  assert.equal(formatBytes(65536), '64Ki');
  assert.equal(formatBytes(1536 * 1024), '1536Ki');
  assert.equal(formatBytes(100), '100');
});
