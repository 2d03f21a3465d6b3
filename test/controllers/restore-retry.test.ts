/**
 * A restore that fails for a reason that may pass is started again as a restore, never afresh
 * (src/kubelet/container.ts): the pod keeps the state of its Checkpoint. The module is the counter
 * fixture whose `k32_restored` traps the first time it runs in a pod's storage (it leaves a file
 * behind, and returns once the file is there), as a pod restored on a loaded node may fail its first
 * start (a deadline, its thread lost) and succeed at the next.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { count, counterPod, runPod, startControllersCluster } from './cluster.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

/** The counter fixture with a `k32_restored` that traps unless the file `f.txt` (offset 260) exists, and makes it first. */
function restoreOnceWat(): string {
  const wat = readFileSync(join(ROOT, 'test/kubelet/fixtures/counter.wat'), 'utf8');
  const original = `  (func (export "k32_restored")
    (global.set $restored (i32.const 1))
    (call $log (i32.const 220) (i32.const 8)))`;
  assert.ok(wat.includes(original), 'the counter fixture still has the k32_restored this test replaces');
  return wat.replace(original, `  (func (export "k32_restored") (local $fd i32)
    (local.set $fd (call $fopen (i32.const 260) (i32.const 5) (i32.const 0)))
    (if (i32.lt_s (local.get $fd) (i32.const 0))
      (then
        (drop (call $fclose (call $fopen (i32.const 260) (i32.const 5) (i32.const 1))))
        unreachable))
    (drop (call $fclose (local.get $fd)))
    (global.set $restored (i32.const 1))
    (call $log (i32.const 220) (i32.const 8)))`);
}

function withImage(pod: V1Pod, image: string): V1Pod {
  pod.spec!.containers[0]!.image = image;
  return pod;
}

test('a restore whose k32_restored traps once is started again as a restore: the pod keeps its state', { timeout: 120_000 }, async (t) => {
  const c = await startControllersCluster(t);
  await c.startWorker('w1');
  const dir = mkdtempSync(join(tmpdir(), 'k32-restore-once-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'm.wat'), restoreOnceWat());
  execFileSync('wat2wasm', [join(dir, 'm.wat'), '-o', join(dir, 'm.wasm')]);
  const bytes = readFileSync(join(dir, 'm.wasm'));
  const pushed = await c.rest.request({ method: 'PUT', path: '/apis/kube32.io/v1/modules/restore-once/data', body: Readable.from([bytes]), contentType: 'application/octet-stream', contentLength: bytes.length });
  pushed.body.resume();
  assert.ok(pushed.status < 300, `pushing the module: ${pushed.status}`);

  const first = await runPod(c, withImage(counterPod('first', 18221, { nodeName: 'w1' }), 'wasm://restore-once'));
  await count(c, first, 18221);
  assert.equal((await count(c, first, 18221)).count, 2);
  await c.createCheckpoint({ metadata: { name: 'first-save', namespace: 'default' }, spec: { podName: 'first' } });
  const saved = await c.until('first-save to finish', async () => {
    const x = await c.getCheckpoint('first-save');
    return x?.status?.phase === 'Saved' || x?.status?.phase === 'Failed' ? x : undefined;
  }, 30_000);
  assert.equal(saved.status?.phase, 'Saved', String(saved.status?.message));

  const second = withImage(counterPod('second', 18222, { nodeName: 'w1', annotations: { 'kube32.io/restore-from': 'first-save' } }), 'wasm://restore-once');
  await c.rest.json({ method: 'POST', path: '/api/v1/namespaces/default/pods', body: second });
  // Running, restored (the controllers remove the annotation once it runs), after one trap.
  const running = await c.until('second to run restored', async () => {
    const p = await c.getPod('second');
    return p?.status?.phase === 'Running' && !p.metadata?.annotations?.['kube32.io/restore-from'] ? p : undefined;
  }, 30_000);
  const status = running.status?.containerStatuses?.[0];
  assert.equal(status?.restartCount, 1, JSON.stringify(status));
  assert.equal(status?.lastState?.terminated?.reason, 'Trap', JSON.stringify(status));
  const answer = await count(c, running, 18222);
  assert.equal(answer.restored, 1, 'k32_restored ran: restored, not started afresh');
  assert.equal(answer.count, 3, 'the count of the Checkpoint goes on');
  const events = (await c.events()).filter((e) => e.involvedObject?.name === 'second').map((e) => e.reason);
  assert.ok(!events.includes('MoveFailed'), `no afresh start: ${events.join(', ')}`);
});
