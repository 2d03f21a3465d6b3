/**
 * End to end, what `kubectl describe` and `kubectl get events` show of the controllers' decisions: one
 * `Moved` per move whose time the Checkpoint's message repeats, a ReplicaSet that cannot create its pod
 * (`FailedCreate` with the API server's message, `ReplicaFailure` on the Deployment, a retry that succeeds
 * once the module is pushed), `InvalidAnnotation` warnings once per pod, and a `Scheduled` event that sorts
 * before the kubelet's.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import type { CoreV1Event, V1Deployment, V1Pod } from '@kubernetes/client-node';
import { counterPod, startControllersCluster } from './cluster.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

const at = (e: CoreV1Event, f: 'firstTimestamp' | 'lastTimestamp') => Date.parse(String(e[f] ?? ''));

test('decision events: one Moved per move, FailedCreate and ReplicaFailure, InvalidAnnotation once, Scheduled first', { timeout: 240_000 }, async (t) => {
  const c = await startControllersCluster(t);
  await c.startWorker('w1');
  await c.startWorker('w2');
  const podEvents = async (name: string, uid?: string) =>
    (await c.events()).filter((e) => e.involvedObject?.kind === 'Pod' && e.involvedObject.name === name && (uid === undefined || e.involvedObject.uid === uid));

  // A pod with wrong annotations runs (OnDrain, 10 s), and hears of each once.
  await c.rest.json({
    method: 'POST',
    path: '/api/v1/namespaces/default/pods',
    body: counterPod('warned', 18181, { annotations: { 'kube32.io/migration': 'Bogus', 'kube32.io/checkpoint-interval': '1s' } }),
  });
  // A pod to move, and its Scheduled event against its kubelet's events.
  await c.rest.json({ method: 'POST', path: '/api/v1/namespaces/default/pods', body: counterPod('mover', 18182) });
  const running = await c.until('both pods to run', async () => {
    const [a, b] = [await c.getPod('warned'), await c.getPod('mover')];
    return a?.status?.phase === 'Running' && b?.status?.phase === 'Running' ? b : undefined;
  }, 60_000);
  const first = await c.until('the mover pod events of the scheduler and the kubelet', async () => {
    const evs = await podEvents('mover', running.metadata?.uid);
    return evs.some((e) => e.reason === 'Scheduled') && evs.some((e) => e.source?.component === 'kubelet') ? evs : undefined;
  });
  const scheduled = first.find((e) => e.reason === 'Scheduled')!;
  for (const e of first.filter((x) => x.source?.component === 'kubelet')) {
    assert.ok(at(scheduled, 'lastTimestamp') <= at(e, 'firstTimestamp'), `Scheduled (${scheduled.lastTimestamp}) after the kubelet's ${e.reason} (${e.firstTimestamp})`);
  }
  assert.match(String(scheduled.firstTimestamp), /:\d\dZ$/, 'whole seconds, as the kubelet stamps its events');
  const describe = await c.api.kubectl(['describe', 'pod', 'mover']);
  assert.equal(describe.code, 0, describe.stderr);
  const lines = describe.stdout.slice(describe.stdout.indexOf('Events:')).split('\n').filter((l) => /^\s+(Normal|Warning)\s/.test(l));
  // Within one second the order is the list's (kubectl sorts by lastTimestamp, whole seconds); across
  // seconds Scheduled must come first.
  if (first.filter((x) => x.source?.component === 'kubelet').every((e) => at(scheduled, 'lastTimestamp') < at(e, 'lastTimestamp'))) {
    assert.match(lines[0] ?? '', /\bScheduled\b/, `kubectl describe pod lists Scheduled first:\n${lines.join('\n')}`);
  }

  // Two moves: one Moved each, with the Checkpoint's figure.
  for (const name of ['move-a', 'move-b']) {
    await c.createCheckpoint({ metadata: { name, namespace: 'default' }, spec: { podName: 'mover', action: 'Move' } });
    await c.until(`${name} to complete`, async () => {
      const ck = await c.getCheckpoint(name);
      if (ck?.status?.phase === 'Failed') throw new Error(`${name} failed: ${ck.status.message}`);
      return ck?.status?.phase === 'Completed';
    }, 60_000);
  }

  // A Deployment whose module is not pushed: FailedCreate on its ReplicaSet, ReplicaFailure on it.
  const template = counterPod('ghost', 18183, { labels: { app: 'ghost' } });
  template.spec!.containers[0]!.image = 'wasm://nosuch';
  await c.rest.json({
    method: 'POST',
    path: '/apis/apps/v1/namespaces/default/deployments',
    body: { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'ghost', namespace: 'default' }, spec: { replicas: 1, selector: { matchLabels: { app: 'ghost' } }, template: { metadata: template.metadata, spec: template.spec } } },
  });
  const failed = await c.until('the Deployment to report ReplicaFailure', async () => {
    const d = await c.rest.json<V1Deployment>({ method: 'GET', path: '/apis/apps/v1/namespaces/default/deployments/ghost' });
    return d.status?.conditions?.find((x) => x.type === 'ReplicaFailure' && x.status === 'True');
  }, 30_000);
  assert.equal(failed.reason, 'FailedCreate');
  assert.match(failed.message ?? '', /no module "nosuch" is stored/);
  const rsDescribe = await c.until('kubectl describe rs to show FailedCreate', async () => {
    const r = await c.api.kubectl(['describe', 'rs', '-l', 'app=ghost']);
    return r.code === 0 && /Warning\s+FailedCreate\s.*Error creating: .*no module "nosuch" is stored/.test(r.stdout) ? r.stdout : undefined;
  });
  assert.doesNotMatch(rsDescribe, /Events:\s+<none>/);

  // The retries back off: by the 13th try (one may follow the status write at once) the next one is 10 s
  // away at least (5 ms doubling).
  await c.until('the FailedCreate event to count 13 tries', async () => {
    const evs = (await c.events()).filter((e) => e.reason === 'FailedCreate' && e.involvedObject?.kind === 'ReplicaSet');
    return evs.length === 1 && (evs[0]!.count ?? 1) >= 13;
  }, 60_000);

  // The module is pushed: the push itself brings the ReplicaSet back (not its back-off), the pod is created,
  // and the condition goes.
  const tmp = mkdtempSync(join(tmpdir(), 'k32-events-'));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));
  const wasm = join(tmp, 'nosuch.wasm');
  execFileSync('wat2wasm', [join(ROOT, 'test/kubelet/fixtures/counter.wat'), '-o', wasm]);
  const bytes = readFileSync(wasm);
  const res = await c.rest.request({ method: 'PUT', path: '/apis/kube32.io/v1/modules/nosuch/data', body: Readable.from([bytes]), contentType: 'application/octet-stream', contentLength: bytes.length });
  res.body.resume();
  assert.ok(res.status < 300, `push: ${res.status}`);
  await c.until('the ghost pod to be created and the ReplicaFailure to go', async () => {
    const pods = await c.rest.json<{ items: V1Pod[] }>({ method: 'GET', path: '/api/v1/namespaces/default/pods?labelSelector=app%3Dghost' });
    const d = await c.rest.json<V1Deployment>({ method: 'GET', path: '/apis/apps/v1/namespaces/default/deployments/ghost' });
    return pods.items.length === 1 && !d.status?.conditions?.some((x) => x.type === 'ReplicaFailure');
  }, 8_000);

  // By now any second decision would have been recorded long since.
  const all = await c.events();
  for (const name of ['move-a', 'move-b']) {
    const ck = (await c.getCheckpoint(name))!;
    const moved = all.filter((e) => e.reason === 'Moved' && (e.message ?? '').startsWith(`${name}:`));
    assert.equal(moved.length, 1, `one Moved for ${name}: ${moved.map((e) => e.message).join(' | ')}`);
    assert.equal((moved[0]!.count ?? 1), 1);
    const ms = /moved in (\d+) ms from the freeze/.exec(ck.status?.message ?? '')?.[1];
    assert.ok(ms, `the Checkpoint's message gives the time: ${ck.status?.message}`);
    assert.match(moved[0]!.message ?? '', new RegExp(` in ${ms} ms from the freeze to Running$`), 'the event and the Checkpoint give one figure');
    assert.equal(all.filter((e) => e.reason === 'Moving' && (e.message ?? '').startsWith(`${name}:`)).length, 1, `one Moving for ${name}`);
  }
  const warned = (await c.getPod('warned'))!;
  const warnings = all.filter((e) => e.reason === 'InvalidAnnotation' && e.involvedObject?.uid === warned.metadata?.uid);
  assert.deepEqual(warnings.map((e) => [e.type, e.message, e.count]).sort(), [
    ['Warning', 'kube32.io/checkpoint-interval "1s" is below the minimum of 10s: 10s is used', 1],
    ['Warning', 'kube32.io/migration "Bogus" is not OnDrain, Never or Auto: treated as OnDrain', 1],
  ]);
});
