/**
 * The main job, as the README's first command (scripts/demo.sh) runs it, with an assertion at each step:
 * a local cluster from `kube32-cli up`, the counter example pushed and run as a Deployment with a
 * Service, requests, the real `kubectl drain` of its worker, and the count and pod clock going on from
 * where they were on the other worker, with the Checkpoint and the Moved event; then the cluster stops
 * (workers first) and a second `up` on the same data dir finds its objects again.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import {
  COUNTER_DIR,
  COUNTER_WASM,
  type CounterReply,
  askCounter,
  counterManifest,
  getPods,
  logTails,
  podReady,
  skipUnlessBuilt,
  startCluster,
  waitFor,
} from './cluster.ts';

test('the main job: a counter keeps counting across kubectl drain', { timeout: 300_000, skip: skipUnlessBuilt({ counter: true }) }, async (t) => {
  const c = await startCluster(t, { workers: 2 });
  t.after(() => {
    if (process.exitCode) console.error(logTails(c.dataDir));
  });
  const m = counterManifest();

  // Two workers, Ready, seen by the real kubectl.
  const nodes = await c.kubectl(['get', 'nodes', '-o', 'jsonpath={.items[*].metadata.name}']);
  assert.equal(nodes.code, 0, nodes.stderr);
  assert.deepEqual(nodes.stdout.trim().split(/\s+/).sort(), ['worker-1', 'worker-2']);

  // Push the module: the digest printed is the file's SHA-256.
  const digest = createHash('sha256').update(readFileSync(COUNTER_WASM)).digest('hex');
  const push = await c.cli(['push', COUNTER_WASM, '--name', m.moduleName]);
  assert.equal(push.code, 0, push.stderr);
  assert.match(push.stdout, new RegExp(`sha256:${digest}`));
  const mod = await c.kubectl(['get', `modules.kube32.io/${m.moduleName}`, '-o', 'jsonpath={.spec.sha256}']);
  assert.equal(mod.stdout.trim(), digest, mod.stderr);

  // The Deployment and the Service.
  const apply = await c.kubectl(['apply', '-f', COUNTER_DIR]);
  assert.equal(apply.code, 0, apply.stderr);
  const rollout = await c.kubectl(['rollout', 'status', `deployment/${m.deployment}`, '--timeout=90s'], { timeoutMs: 100_000 });
  assert.equal(rollout.code, 0, `${rollout.stdout}${rollout.stderr}\n${logTails(c.dataDir)}`);
  const [pod] = await getPods(c, ['-l', m.selector]);
  assert.ok(pod && podReady(pod), `counter pod not Ready: ${JSON.stringify(pod?.status)}`);
  const before = { node: pod.spec.nodeName!, uid: pod.metadata.uid, name: pod.metadata.name, ip: pod.status.podIP! };
  assert.ok(before.node === 'worker-1' || before.node === 'worker-2');

  // Requests: the count goes up by one each.
  let last: CounterReply | undefined;
  for (let i = 0; i < 5; i++) {
    const r = await askCounter(before.ip, m.containerPort);
    if (last) assert.equal(r.count, last.count + 1, 'each request counts once');
    last = r;
  }
  // ...and through the API server's service proxy, as the demo shows it.
  const viaService = await c.kubectl([
    'get',
    '--raw',
    `/api/v1/namespaces/default/services/${m.service}/proxy/count`,
  ]);
  assert.equal(viaService.code, 0, viaService.stderr);
  last = JSON.parse(viaService.stdout) as CounterReply;
  const beforeDrain = last;

  // The real kubectl drain of the pod's worker.
  const drain = await c.kubectl(['drain', before.node, '--ignore-daemonsets', '--timeout=120s'], { timeoutMs: 130_000 });
  assert.equal(drain.code, 0, `${drain.stdout}${drain.stderr}\n${logTails(c.dataDir)}`);
  assert.match(drain.stdout, /drained/);

  // The pod runs on the other worker: same name (a move keeps it), a new uid, Ready.
  const other = before.node === 'worker-1' ? 'worker-2' : 'worker-1';
  const moved = await waitFor('the counter pod Ready on the other worker', 60_000, async () => {
    const pods = await getPods(c, ['-l', m.selector]);
    return pods.length === 1 && pods[0]!.spec.nodeName === other && podReady(pods[0]) ? pods[0] : undefined;
  });
  assert.equal(moved.metadata.name, before.name, 'a moved pod keeps its name');
  assert.notEqual(moved.metadata.uid, before.uid, 'a moved pod has a new uid');

  // The count and the pod clock go on from where they were.
  const after = await askCounter(moved.status.podIP!, m.containerPort);
  assert.equal(after.count, beforeDrain.count + 1, `count carried over: ${JSON.stringify({ beforeDrain, after })}`);
  assert.ok(after.podTimeMs >= beforeDrain.podTimeMs, `pod clock never goes backward: ${JSON.stringify({ beforeDrain, after })}`);
  if (beforeDrain.ticks !== undefined && after.ticks !== undefined) assert.ok(after.ticks >= beforeDrain.ticks);
  assert.equal(after.restores, (beforeDrain.restores ?? 0) + 1, 'restored once from the snapshot, not started afresh');
  assert.equal(after.node, other, 'NODE_NAME (spec.nodeName) is the new node');

  // The Checkpoint of the eviction, Completed, with its target; the Moved event. The controllers write
  // Completed (and then record Moved) once the replacement runs and its restore-from annotation is removed,
  // a moment after the pod reads Ready: wait for them.
  type Ckpt = { metadata: { labels?: Record<string, string> }; status?: Record<string, unknown> };
  const evict = await waitFor('the eviction Checkpoint to finish', 30_000, async () => {
    const ckpt = await c.kubectl(['get', 'ckpt', '-o', 'json']);
    if (ckpt.code !== 0) throw new Error(ckpt.stderr);
    const k = (JSON.parse(ckpt.stdout) as { items: Ckpt[] }).items.find((x) => x.metadata.labels?.['kube32.io/trigger'] === 'eviction');
    return k?.status?.phase === 'Completed' || k?.status?.phase === 'Failed' ? k : undefined;
  });
  assert.equal(evict.status?.phase, 'Completed', JSON.stringify(evict.status));
  assert.equal(evict.status?.targetNode, other);
  const wide = await c.kubectl(['get', 'ckpt', '-o', 'wide']);
  assert.match(wide.stdout.split('\n')[0]!, /NAME\s+POD\s+ACTION\s+PHASE\s+NODE\s+SIZE\s+AGE\s+TARGET\s+NEW POD\s+MESSAGE/);
  assert.match(wide.stdout, /Completed/);
  await waitFor('the Moved event', 30_000, async () => {
    const events = await c.kubectl(['get', 'events', '--field-selector', `involvedObject.name=${before.name}`]);
    if (events.code !== 0) throw new Error(events.stderr);
    return /Moved/.test(events.stdout);
  });

  // Ctrl-C (SIGTERM): the workers stop first, then the control plane; exit 0.
  const code = await c.stop();
  assert.equal(code, 0, c.output());
  const out = c.output();
  assert.ok(out.indexOf('stopping worker-') < out.indexOf('stopping the control plane'), out);

  // A second up on the same data dir finds the Deployment, the Service and the module again.
  const again = await startCluster(t, { workers: 1, dataDir: c.dataDir });
  const dep = await again.kubectl(['get', 'deployment', m.deployment, '-o', 'name']);
  assert.equal(dep.stdout.trim(), `deployment.apps/${m.deployment}`, dep.stderr);
  const svc = await again.kubectl(['get', 'service', m.service, '-o', 'name']);
  assert.equal(svc.stdout.trim(), `service/${m.service}`, svc.stderr);
  const mod2 = await again.kubectl(['get', `modules.kube32.io/${m.moduleName}`, '-o', 'jsonpath={.spec.sha256}']);
  assert.equal(mod2.stdout.trim(), digest);
  assert.equal(await again.stop(), 0);
});
