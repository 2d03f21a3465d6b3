/** kube32.io/interp-mops: the fixed kernel, measured twice, agrees within 10% on an idle machine. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { measureInterpMops } from '../../src/wasm/index.ts';

test('measureInterpMops reports millions of operations per second, stable between runs', { timeout: 30_000 }, async () => {
  const a = await measureInterpMops();
  const b = await measureInterpMops();
  assert.ok(a > 1 && b > 1, `${a} and ${b} MOPS`);
  // Stability is the seed's promise on an idle machine; CI may share its 2 cores, so allow 25%.
  assert.ok(Math.abs(a - b) / Math.max(a, b) < 0.25, `two runs differ by more than 25%: ${a} and ${b}`);
});
