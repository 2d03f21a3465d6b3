/**
 * kube32.io/interp-mops: the fixed kernel runs and reports millions of operations per second.
 * Its stability between runs (the seed: within 10% on an idle machine) is a timing property, so it
 * is measured by bench/runtime, not asserted here (CI machines are shared).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { measureInterpMops } from '../../src/wasm/index.ts';

test('measureInterpMops reports millions of WebAssembly operations per second', { timeout: 30_000 }, async () => {
  const mops = await measureInterpMops();
  assert.ok(Number.isFinite(mops) && mops > 1, `${mops} MOPS`);
  assert.equal(Math.round(mops * 10) / 10, mops, 'rounded to one decimal, as the annotation shows it');
});
