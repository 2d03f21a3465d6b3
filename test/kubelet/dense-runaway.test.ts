/**
 * kube32-sim with dense pods (`--pods-per-thread 2`), end to end: a pod whose request loops forever
 * runs past its call deadline (10 s), which stops the thread it shares. What a user then reads in the
 * API: the runaway pod's Last State carries its own message (`call k32_handle still running after
 * 10000 ms: ...`) and the time it really started, its co-tenant's carries the stopped thread's
 * message naming the runaway, both get a Warning event naming the cause, and both are restarted and
 * serve again (the runaway's restart is not put back on the thread about to be stopped).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1ContainerStateTerminated, V1Pod } from '@kubernetes/client-node';
import { fetch } from 'undici';
import { startCluster, fixturePod, freePort, type Cluster } from './cluster.ts';

/** A request pod: `GET /l...` loops forever, any other path answers `ok`. */
const LOOP_WAT = `(module
  (memory (export "memory") 1)
  (data (i32.const 0) "HTTP/1.1 200 OK\\r\\ncontent-length: 2\\r\\n\\r\\nok")
  (func (export "k32_alloc") (param i32) (result i32) (i32.const 4096))
  (func (export "k32_init"))
  (func (export "k32_handle") (param $p i32) (param $l i32) (result i64)
    (if (i32.eq (i32.load8_u (i32.add (local.get $p) (i32.const 5))) (i32.const 108)) (then (loop $forever (br $forever))))
    (i64.shl (i64.const 40) (i64.const 32))))`;

/** The pod's container's last termination, once it has been restarted after one. */
async function lastTerminated(c: Cluster, name: string): Promise<{ pod: V1Pod; last: V1ContainerStateTerminated }> {
  return c.until(`pod ${name} restarted after an end`, async () => {
    const pod = await c.getPod(name);
    const s = pod?.status?.containerStatuses?.[0];
    return s?.lastState?.terminated && s.state?.running ? { pod: pod!, last: s.lastState.terminated } : undefined;
  }, 40_000);
}

/** Resolves once the pod on `address:port` answers 200 `ok` (until `ms`). */
async function serving(c: Cluster, name: string, address: string, port: number, ms: number): Promise<void> {
  await c.until(`pod ${name} answering 200 ok`, async () => {
    const res = await fetch(`http://${address}:${port}/x`, { signal: AbortSignal.timeout(5_000) }).catch(() => undefined);
    return res !== undefined && res.status === 200 && (await res.text()) === 'ok';
  }, ms);
}

test('dense pods: a runaway call stops its shared thread; each pod\'s Last State and Warning name its own cause, and both serve again', { timeout: 120_000 }, async (t) => {
  const c = await startCluster(t);
  const src = join(c.tmp, 'loop.wat');
  writeFileSync(src, LOOP_WAT);
  execFileSync('wat2wasm', [src, '-o', join(c.tmp, 'loop.wasm')]);
  await c.admin.json('PUT', '/apis/kube32.io/v1/modules/loop-fixture/data', { body: readFileSync(join(c.tmp, 'loop.wasm')), contentType: 'application/octet-stream' });
  const address = '127.0.0.61';
  await c.startWorker('dense', address, ['--pods-per-thread', '2']);
  const ports = { a: await freePort(address), b: await freePort(address) };
  for (const [name, port] of Object.entries(ports)) {
    const pod = fixturePod(name, 'dense', port);
    pod.spec!.containers[0]!.image = 'wasm://loop-fixture';
    await c.admin.json('POST', '/api/v1/namespaces/default/pods', { body: pod });
  }
  for (const [name, port] of Object.entries(ports)) {
    await serving(c, name, address, port, 20_000);
  }

  const sentAt = Date.now();
  // The looping request never gets an answer from the pod's code; whatever it gets is not checked.
  void fetch(`http://${address}:${ports.a}/l`, { signal: AbortSignal.timeout(30_000) }).then((r) => r.text()).catch(() => {});
  const a = await lastTerminated(c, 'a');
  const b = await lastTerminated(c, 'b');

  assert.equal(a.last.reason, 'Error');
  assert.match(a.last.message ?? '', /^call k32_handle still running after 10000 ms: a pod on a shared thread cannot run past its call deadline, so its thread was stopped$/);
  const started = new Date(a.last.startedAt!).getTime();
  const finished = new Date(a.last.finishedAt!).getTime();
  assert.ok(started <= sentAt, `the runaway's Last State starts when it started (${a.last.startedAt}), before the request`);
  assert.ok(finished - started >= 9_000, `started ${a.last.startedAt}, finished ${a.last.finishedAt}: the 10 s it ran`);
  assert.equal(b.last.reason, 'Error');
  assert.match(b.last.message ?? '', /^the shared thread was stopped: pod default\/a \(container c\) ran past its call deadline \(call k32_handle still running after 10000 ms\)/);

  const warnings = await c.until('the Warning events of a and b', async () => {
    const list = await c.admin.json<{ items: Array<{ type?: string; reason?: string; message?: string; involvedObject?: { name?: string } }> }>('GET', '/api/v1/namespaces/default/events');
    const w = (name: string) => list.items.find((e) => e.type === 'Warning' && e.reason === 'Failed' && e.involvedObject?.name === name);
    return w('a') && w('b') ? { a: w('a')!, b: w('b')! } : undefined;
  });
  assert.match(warnings.a.message ?? '', /^Error: call k32_handle still running after 10000 ms/);
  assert.match(warnings.b.message ?? '', /^Error: the shared thread was stopped: pod default\/a/);

  for (const [name, port] of Object.entries(ports)) {
    await serving(c, name, address, port, 20_000);
    const s = (await c.getPod(name))?.status?.containerStatuses?.[0];
    assert.equal(s?.restartCount, 1, `${name} was restarted once (its restart was not stopped with the old thread)`);
  }
});
