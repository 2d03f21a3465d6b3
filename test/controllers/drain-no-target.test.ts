/**
 * `kubectl drain` of a node whose movable pod no other node can take (seed 002 "Drain and evictions":
 * "When a move that an eviction asked for fails before the replacement, the pod is deleted as an
 * eviction deletes it, so the drain completes"): the eviction deletes the pod, no Checkpoint is made,
 * a Warning event `MoveFailed` on the pod says why, and the real `kubectl drain` completes. `kubectl drain --dry-run=server` then evicts nothing: a pod
 * that could move stays where it is, with its state.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { count, counterPod, runPod, startControllersCluster } from './cluster.ts';

const PORT = 18090;

test('kubectl drain deletes a movable pod that no node can take, as an eviction deletes it, and completes', { timeout: 150_000 }, async (t) => {
  const c = await startControllersCluster(t);
  await c.startWorker('w1', ['--labels', 'zone=a']);
  await c.startWorker('w2');

  const spec = counterPod('pinned', PORT);
  spec.spec!.nodeSelector = { zone: 'a' };
  const pod = await runPod(c, spec);
  assert.equal(pod.spec?.nodeName, 'w1');
  assert.equal((await count(c, pod, PORT)).count, 1);

  const drain = await c.api.kubectl(['drain', 'w1', '--ignore-daemonsets', '--force', '--timeout=60s'], { timeoutMs: 90_000 });
  assert.equal(drain.code, 0, `the drain completes: ${JSON.stringify(drain)}`);
  assert.match(drain.stdout + drain.stderr, /pod\/pinned evicted/);
  assert.match(drain.stdout + drain.stderr, /node\/w1 drained/);
  assert.equal(await c.getPod('pinned'), undefined, 'the pod was deleted');
  const ckpts = await c.rest.json<{ items: unknown[] }>({ method: 'GET', path: '/apis/kube32.io/v1/namespaces/default/checkpoints' });
  assert.equal(ckpts.items.length, 0, 'no Checkpoint for a move that could only fail');
  const warning = (await c.events()).find((e) => e.involvedObject.name === 'pinned' && e.reason === 'MoveFailed');
  assert.equal(warning?.type, 'Warning');
  assert.equal(warning?.involvedObject.uid, pod.metadata?.uid);
  assert.match(warning?.message ?? '', /^Evicted without a move, its state lost: no node can take it: 0\/2 nodes are available: .*node\(s\) didn't match Pod's node affinity\/selector/);

  // kubectl drain --dry-run=server: kubectl says what it would evict and nothing moves (it sends the dry
  // run inside the Eviction's deleteOptions, not on the URL).
  assert.equal((await c.api.kubectl(['uncordon', 'w1'])).code, 0);
  const free = await runPod(c, counterPod('free', PORT, { nodeName: 'w2' }));
  const dry = await c.api.kubectl(['drain', 'w2', '--ignore-daemonsets', '--force', '--dry-run=server', '--timeout=30s'], { timeoutMs: 60_000 });
  assert.equal(dry.code, 0, JSON.stringify(dry));
  assert.match(dry.stdout + dry.stderr, /evicting pod default\/free \(server dry run\)/);
  const after = await c.getPod('free');
  assert.equal(after?.metadata?.uid, free.metadata?.uid, 'a server dry run moves nothing: the same pod');
  const ckptsAfter = await c.rest.json<{ items: unknown[] }>({ method: 'GET', path: '/apis/kube32.io/v1/namespaces/default/checkpoints' });
  assert.equal(ckptsAfter.items.length, 0, 'no Checkpoint was created by a dry run');
  const w2 = await c.api.kubectl(['get', 'node', 'w2', '-o', 'jsonpath={.spec.unschedulable}']);
  assert.equal(w2.stdout.trim(), '', 'a server dry run does not cordon');
  assert.equal((await count(c, after!, PORT)).count, 1, 'the pod kept running with its state');
});
