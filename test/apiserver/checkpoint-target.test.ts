/**
 * A Move Checkpoint's `spec.target` is `nodeName` or `nodeSelector` (docs/checkpoints.md), not both: the
 * checkpoint controller goes to a named node without looking at a selector, so a target with both moved
 * the pod to the named node whatever its labels (found by a user: `{nodeName: worker-2, nodeSelector:
 * {a: b}}` moved to worker-2, which has no label a=b). Both are refused with 422 Invalid; each alone is taken.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startApiServer } from '../helpers/apiserver.ts';

test('a Checkpoint target with both nodeName and nodeSelector is refused; either alone is created', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t);
  const create = (name: string, target: unknown) =>
    api.kubectl(['create', '-f', '-'], { input: JSON.stringify({ apiVersion: 'kube32.io/v1', kind: 'Checkpoint', metadata: { name }, spec: { podName: 'p', action: 'Move', target } }) });
  let r = await create('both', { nodeName: 'worker-2', nodeSelector: { a: 'b' } });
  assert.notEqual(r.code, 0, 'a target with both was created');
  assert.match(r.stderr, /The Checkpoint "both" is invalid: spec\.target: Invalid value: .*nodeName and nodeSelector are exclusive: name the node, or give a selector for the scheduler to pick among/);
  r = await create('named', { nodeName: 'worker-2' });
  assert.equal(r.code, 0, r.stderr);
  r = await create('selected', { nodeSelector: { a: 'b' } });
  assert.equal(r.code, 0, r.stderr);
});
