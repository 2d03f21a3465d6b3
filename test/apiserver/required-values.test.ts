/**
 * A required field left out is `Required value`, as kube-apiserver says it: a Module applied without its
 * spec's fields answered `spec.sha256: Invalid value: undefined: must be 64 lowercase hex digits`, a
 * JavaScript word a user cannot act on (fresh-user trial).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startApiServer } from '../helpers/apiserver.ts';

test('a Module without spec.sha256 and spec.sizeBytes: Required value for each, never "undefined"', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t);
  const r = await api.kubectl(['apply', '-f', '-'], { input: 'apiVersion: kube32.io/v1\nkind: Module\nmetadata: {name: m1}\nspec: {}\n' });
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /The Module "m1" is invalid:/);
  assert.match(r.stderr, /spec\.sha256: Required value: must be 64 lowercase hex digits/);
  assert.match(r.stderr, /spec\.sizeBytes: Required value: must be a non-negative integer/);
  assert.doesNotMatch(r.stderr, /undefined/);
  // A value that is there but wrong is still Invalid value, with the value.
  const bad = await api.kubectl(['apply', '-f', '-'], { input: 'apiVersion: kube32.io/v1\nkind: Module\nmetadata: {name: m2}\nspec: {sha256: xyz, sizeBytes: -1}\n' });
  assert.match(bad.stderr, /spec\.sha256: Invalid value: "xyz": must be 64 lowercase hex digits/);
  assert.match(bad.stderr, /spec\.sizeBytes: Invalid value: -1: must be a non-negative integer/);
});
