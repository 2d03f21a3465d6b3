/**
 * StatefulSets on a real local cluster (`kube32-cli up`, three workers) with the real kubectl: a StatefulSet
 * of three counter pods comes up in order with stable names (`counter-0`, `-1`, `-2`, one per worker since
 * each serves on its node's port 8080), `kubectl rollout status sts` completes, `kubectl scale` down removes
 * the highest ordinal, and `kubectl drain` of a worker moves its StatefulSet pod to the worker freed: the
 * same name, ordinal and labels, a new uid, and the count going on from where it was (issue 19).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { askCounter, COUNTER_WASM, counterManifest, getPods, logTails, type PodView, podReady, skipUnlessBuilt, startCluster, waitFor } from './cluster.ts';

const SET = `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: counter
spec:
  serviceName: counter
  replicas: 3
  selector:
    matchLabels: {app: counter-sts}
  template:
    metadata:
      labels: {app: counter-sts}
      annotations:
        kube32.io/tick-interval: 1s
        kube32.io/migration: OnDrain
    spec:
      containers:
        - name: counter
          image: wasm://counter
          ports: [{containerPort: 8080}]
          env:
            - name: NODE_NAME
              valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
          resources: {limits: {memory: 1Mi}}
`;

type Event = { reason: string; message: string; firstTimestamp?: string; metadata: { creationTimestamp: string; name: string } };

test('a StatefulSet of counters: ordered stable names, scale down from the top, a drain keeps name and count', { timeout: 420_000, skip: skipUnlessBuilt({ counter: true }) }, async (t) => {
  const c = await startCluster(t, { workers: 3 });
  t.after(() => {
    if (process.exitCode) console.error(logTails(c.dataDir));
  });
  const m = counterManifest();
  const push = await c.cli(['push', COUNTER_WASM, '--name', m.moduleName]);
  assert.equal(push.code, 0, push.stderr);

  const apply = await c.kubectl(['apply', '-f', '-'], { input: SET });
  assert.equal(apply.code, 0, apply.stderr);
  assert.equal(apply.stdout.trim(), 'statefulset.apps/counter created');
  const rollout = await c.kubectl(['rollout', 'status', 'statefulset/counter', '--timeout=200s'], { timeoutMs: 210_000 });
  assert.equal(rollout.code, 0, `${rollout.stdout}${rollout.stderr}\n${logTails(c.dataDir)}`);
  assert.match(rollout.stdout, /roll out complete: 3 new pods have been updated/);

  // Stable names, their ordinals as labels, one per worker.
  const pods = (await getPods(c, ['-l', 'app=counter-sts'])).sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
  assert.deepEqual(
    pods.map((p) => p.metadata.name),
    ['counter-0', 'counter-1', 'counter-2'],
  );
  for (const [i, p] of pods.entries()) {
    assert.ok(podReady(p), `${p.metadata.name} Ready`);
    assert.equal(p.metadata.labels?.['statefulset.kubernetes.io/pod-name'], p.metadata.name);
    assert.equal(p.metadata.labels?.['apps.kubernetes.io/pod-index'], String(i));
    assert.match(p.metadata.labels?.['controller-revision-hash'] ?? '', /^counter-[0-9a-z]{10}$/);
  }
  assert.equal(new Set(pods.map((p) => p.spec.nodeName)).size, 3, 'one pod per worker');

  // In order: one SuccessfulCreate event for each of counter-0, -1, -2, and each pod created once the one
  // before it was Ready (OrderedReady).
  const ev = await c.kubectl(['get', 'events', '--field-selector', 'involvedObject.kind=StatefulSet,reason=SuccessfulCreate', '-o', 'json']);
  assert.equal(ev.code, 0, ev.stderr);
  const creates = (JSON.parse(ev.stdout) as { items: Event[] }).items.map((e) => e.message).sort();
  assert.deepEqual(creates, [0, 1, 2].map((i) => `create Pod counter-${i} in StatefulSet counter successful`));
  const readyAt = (p: PodView) =>
    Date.parse((p.status.conditions as { type: string; lastTransitionTime?: string }[] | undefined)?.find((x) => x.type === 'Ready')?.lastTransitionTime ?? '');
  const created = (p: PodView) => Date.parse((p.metadata as { creationTimestamp?: string }).creationTimestamp ?? '');
  for (let i = 1; i < 3; i++) assert.ok(created(pods[i]!) >= readyAt(pods[i - 1]!), `counter-${i} created after counter-${i - 1} was Ready`);

  // kubectl get sts and the ControllerRevision.
  const get = await c.kubectl(['get', 'sts', 'counter']);
  assert.equal(get.code, 0, get.stderr);
  assert.match(get.stdout, /^NAME\s+READY\s+AGE$/m);
  assert.match(get.stdout, /^counter\s+3\/3\s+\S+$/m);
  const revs = await c.kubectl(['get', 'controllerrevisions', '-o', 'jsonpath={.items[*].metadata.name}']);
  assert.equal(revs.stdout.trim(), pods[0]!.metadata.labels?.['controller-revision-hash'], revs.stderr);

  // Scale down: the highest ordinal goes.
  const scale = await c.kubectl(['scale', 'sts/counter', '--replicas=2']);
  assert.equal(scale.code, 0, scale.stderr);
  await waitFor('counter-2 gone', 60_000, async () => {
    const names = (await getPods(c, ['-l', 'app=counter-sts'])).map((p) => p.metadata.name).sort();
    return names.join() === 'counter-0,counter-1';
  });
  await waitFor('the set reads 2/2', 30_000, async () => /^counter\s+2\/2\s/m.test((await c.kubectl(['get', 'sts', 'counter'])).stdout));

  // A drain of counter-1's worker moves it to the worker counter-2 left: same name and ordinal, the count goes on.
  const victim = pods[1]!;
  const freed = pods[2]!.spec.nodeName!;
  for (let i = 0; i < 3; i++) await askCounter(victim.status.podIP!, m.containerPort);
  const before = await askCounter(victim.status.podIP!, m.containerPort);
  const drain = await c.kubectl(['drain', victim.spec.nodeName!, '--ignore-daemonsets', '--timeout=150s'], { timeoutMs: 160_000 });
  assert.equal(drain.code, 0, `${drain.stdout}${drain.stderr}\n${logTails(c.dataDir)}`);
  const moved = await waitFor('counter-1 Ready on the freed worker', 90_000, async () => {
    const p = (await getPods(c, ['-l', 'app=counter-sts'])).find((x) => x.metadata.name === 'counter-1');
    return p && p.spec.nodeName === freed && podReady(p) ? p : undefined;
  });
  assert.notEqual(moved.metadata.uid, victim.metadata.uid, 'a moved pod has a new uid');
  assert.equal(moved.metadata.labels?.['apps.kubernetes.io/pod-index'], '1');
  const after = await askCounter(moved.status.podIP!, m.containerPort);
  assert.equal(after.count, before.count + 1, `count carried over: ${JSON.stringify({ before, after })}`);
  assert.equal(after.restores, (before.restores ?? 0) + 1, 'restored from the snapshot, not started afresh');
  assert.equal(after.node, freed);

  // Never a second pod of one ordinal: two pods, counter-0 untouched, and no create of counter-1 after the first.
  const names = (await getPods(c, ['-l', 'app=counter-sts'])).map((p) => p.metadata.name).sort();
  assert.deepEqual(names, ['counter-0', 'counter-1']);
  const ev2 = await c.kubectl(['get', 'events', '--field-selector', 'involvedObject.kind=StatefulSet,reason=SuccessfulCreate', '-o', 'json']);
  const creates2 = (JSON.parse(ev2.stdout) as { items: Event[] }).items.map((e) => e.message).sort();
  assert.deepEqual(creates2, creates, 'the move created no pod of its own');
  await waitFor('the set reads 2/2 after the move', 30_000, async () => /^counter\s+2\/2\s/m.test((await c.kubectl(['get', 'sts', 'counter'])).stdout));
});
