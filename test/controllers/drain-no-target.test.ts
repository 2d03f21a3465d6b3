/**
 * `kubectl drain` of a node whose movable pod no other node can take (seed 002 "Drain and evictions"):
 * the eviction is refused with 429 TooManyRequests naming why, before any Checkpoint, so the pod keeps
 * running with its state and the real `kubectl drain` retries it, printing the reason, until its
 * `--timeout`; once a node can take it, the retried eviction moves it and its count carries over.
 * `kubectl drain --dry-run=server` then evicts nothing: the pod stays, with its state.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { count, counterPod, runPod, startControllersCluster } from './cluster.ts';

const PORT = 18090;

test('kubectl drain refuses to evict a pod that cannot move (429, the reason printed) and moves it once a node can take it', { timeout: 150_000 }, async (t) => {
  const c = await startControllersCluster(t);
  await c.startWorker('w1', ['--labels', 'zone=a']);
  await c.startWorker('w2');

  const spec = counterPod('pinned', PORT);
  spec.spec!.nodeSelector = { zone: 'a' };
  const pod = await runPod(c, spec);
  assert.equal(pod.spec?.nodeName, 'w1');
  await count(c, pod, PORT);
  assert.equal((await count(c, pod, PORT)).count, 2);

  // A drain with a short timeout: every eviction is refused, the drain fails, the pod keeps its state.
  const short = await c.api.kubectl(['drain', 'w1', '--ignore-daemonsets', '--force', '--timeout=7s'], { timeoutMs: 30_000 });
  assert.notEqual(short.code, 0, `the drain does not report success: ${JSON.stringify(short)}`);
  const out = short.stdout + short.stderr;
  assert.match(out, /Cannot evict pod as it would lose its state: no node can take it: 0\/2 nodes are available: /);
  assert.match(out, /1 node\(s\) didn't match Pod's node affinity\/selector/);
  assert.match(out, /1 node\(s\) were the pod's own node/);
  assert.match(out, /It keeps running on w1; to let it go without its state, delete it or set kube32.io\/migration: Never/);
  const still = await c.getPod('pinned');
  assert.equal(still?.metadata?.uid, pod.metadata?.uid, 'the same pod');
  assert.equal(still?.metadata?.deletionTimestamp, undefined, 'not deleted');
  assert.equal((await count(c, pod, PORT)).count, 3, 'the count went on: the state was kept');
  const ckpts = await c.rest.json<{ items: unknown[] }>({ method: 'GET', path: '/apis/kube32.io/v1/namespaces/default/checkpoints' });
  assert.equal(ckpts.items.length, 0, 'no Checkpoint was created for a refused eviction');

  // A drain that waits: refused (it says so) until w2 gets the label, then the pod moves with its count.
  const cache = mkdtempSync(join(tmpdir(), 'k32-drain-cache-'));
  t.after(() => rmSync(cache, { recursive: true, force: true }));
  const drain = spawn('kubectl', ['--kubeconfig', c.api.kubeconfigPath, '--cache-dir', cache, 'drain', 'w1', '--ignore-daemonsets', '--force', '--timeout=90s'], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => {
    if (drain.exitCode === null) drain.kill('SIGKILL');
  });
  let output = '';
  drain.stdout.on('data', (b: Buffer) => { output += b.toString(); });
  drain.stderr.on('data', (b: Buffer) => { output += b.toString(); });
  const exited = new Promise<number | null>((resolve) => drain.on('exit', (code) => resolve(code)));
  await c.until('kubectl drain to print the refusal', () => /will retry after 5s\): Cannot evict pod as it would lose its state/.test(output), 30_000);
  const label = await c.api.kubectl(['label', 'node', 'w2', 'zone=a']);
  assert.equal(label.code, 0, label.stderr);
  assert.equal(await exited, 0, output);
  assert.match(output, /pod\/pinned evicted/);
  assert.match(output, /node\/w1 drained/);
  const moved = await c.until('the pod to run on w2', async () => {
    const p = await c.getPod('pinned');
    return p?.spec?.nodeName === 'w2' && p.status?.phase === 'Running' ? p : undefined;
  }, 60_000) as V1Pod;
  assert.notEqual(moved.metadata?.uid, pod.metadata?.uid, 'a replacement (new uid), as kubectl drain waits for');
  assert.equal((await count(c, moved, PORT)).count, 4, 'the count carried over the move');

  // kubectl drain --dry-run=server: kubectl says what it would evict and nothing moves (it sends the dry
  // run inside the Eviction's deleteOptions, not on the URL). w1 can take the pod again once uncordoned.
  assert.equal((await c.api.kubectl(['uncordon', 'w1'])).code, 0);
  const before = (await c.rest.json<{ items: unknown[] }>({ method: 'GET', path: '/apis/kube32.io/v1/namespaces/default/checkpoints' })).items.length;
  const dry = await c.api.kubectl(['drain', 'w2', '--ignore-daemonsets', '--force', '--dry-run=server', '--timeout=30s'], { timeoutMs: 60_000 });
  assert.equal(dry.code, 0, JSON.stringify(dry));
  assert.match(dry.stdout + dry.stderr, /evicting pod default\/pinned \(server dry run\)/);
  const after = await c.getPod('pinned');
  assert.equal(after?.metadata?.uid, moved.metadata?.uid, 'a server dry run moves nothing: the same pod');
  assert.equal(after?.spec?.nodeName, 'w2');
  const ckptsAfter = await c.rest.json<{ items: unknown[] }>({ method: 'GET', path: '/apis/kube32.io/v1/namespaces/default/checkpoints' });
  assert.equal(ckptsAfter.items.length, before, 'no Checkpoint was created by a dry run');
  const w2 = await c.api.kubectl(['get', 'node', 'w2', '-o', 'jsonpath={.spec.unschedulable}']);
  assert.equal(w2.stdout.trim(), '', 'a server dry run does not cordon');
  assert.equal((await count(c, moved, PORT)).count, 5, 'the pod kept running with its state');
});
