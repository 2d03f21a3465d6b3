/**
 * Each way a pod moves (seed "Pod migration"), end to end on a local cluster from `kube32-cli up` with
 * the counter example: `kube32-cli move` (and its refusal), `kube32-cli checkpoint`, Auto under memory
 * pressure, a faster node joining, and a lost node with periodic checkpoints. In each, the count and the
 * pod clock go on from where they were. (The drain is the main job: main-job.test.ts.)
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  COUNTER_WASM,
  type CounterReply,
  type PodView,
  type TestCluster,
  askCounter,
  counterManifest,
  getPods,
  logTails,
  nthAddress,
  podReady,
  skipUnlessBuilt,
  startCluster,
  startWorker,
  waitFor,
} from './cluster.ts';

const SKIP = skipUnlessBuilt({ counter: true });

interface CheckpointView {
  metadata: { name: string; labels?: Record<string, string>; creationTimestamp?: string };
  spec: { podName: string; action?: string };
  status?: { phase?: string; targetNode?: string; nodeName?: string; takenAt?: string; message?: string; blockers?: string[] };
}

async function checkpoints(c: TestCluster): Promise<CheckpointView[]> {
  const r = await c.kubectl(['get', 'checkpoints.kube32.io', '-o', 'json']);
  if (r.code !== 0) throw new Error(r.stderr);
  return (JSON.parse(r.stdout) as { items: CheckpointView[] }).items;
}

/** Pushes the counter and creates one bare counter pod from the example's pod template. */
async function counterPod(
  c: TestCluster,
  name: string,
  opts: { annotations?: Record<string, string>; nodeName?: string; memory?: string } = {},
): Promise<{ pod: PodView; port: number }> {
  const m = counterManifest();
  const push = await c.cli(['push', COUNTER_WASM, '--name', m.moduleName]);
  assert.equal(push.code, 0, push.stderr);
  // biome-ignore lint/suspicious/noExplicitAny: manifest documents are free-form YAML
  const dep = m.docs.find((d) => d.kind === 'Deployment') as any;
  const spec = structuredClone(dep.spec.template.spec);
  if (opts.nodeName) spec.nodeName = opts.nodeName;
  if (opts.memory) {
    spec.containers[0].resources = { requests: { memory: opts.memory }, limits: { memory: opts.memory } };
  }
  const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name, labels: { test: name }, annotations: opts.annotations ?? {} }, spec };
  const r = await c.kubectl(['create', '-f', '-'], { input: JSON.stringify(pod) });
  assert.equal(r.code, 0, r.stderr);
  const ready = await waitFor(`pod ${name} Ready`, 60_000, async () => {
    const [p] = await getPods(c, ['-l', `test=${name}`]);
    return podReady(p) ? p : undefined;
  });
  return { pod: ready, port: m.containerPort };
}

/** Asks the counter `n` times and answers the last reply. */
async function count(pod: PodView, port: number, n: number): Promise<CounterReply> {
  let last: CounterReply | undefined;
  for (let i = 0; i < n; i++) last = await askCounter(pod.status.podIP!, port);
  return last!;
}

/** Waits for the pod called `name` to run Ready on `node` with another uid than `oldUid`. */
function movedTo(c: TestCluster, name: string, node: string, oldUid: string, timeoutMs = 90_000): Promise<PodView> {
  return waitFor(`pod ${name} Ready on ${node}`, timeoutMs, async () => {
    const [p] = await getPods(c, ['-l', `test=${name}`]);
    return p && p.spec.nodeName === node && p.metadata.uid !== oldUid && podReady(p) ? p : undefined;
  });
}

function assertCarried(before: CounterReply, after: CounterReply, context: string): void {
  assert.equal(after.count, before.count + 1, `${context}: the count goes on (${JSON.stringify({ before, after })})`);
  assert.ok(after.podTimeMs >= before.podTimeMs, `${context}: the pod clock never goes backward (${JSON.stringify({ before, after })})`);
}

test('kube32-cli move and checkpoint: a counter moves with its state; a pod that opts out is refused with its blocker', { timeout: 240_000, skip: SKIP }, async (t) => {
  const c = await startCluster(t, { workers: 2 });
  t.after(() => {
    if (process.exitCode) console.error(logTails(c.dataDir));
  });
  const { pod, port } = await counterPod(c, 'mover');
  const before = await count(pod, port, 3);

  // checkpoint: Saved, and the pod keeps running where it is, with the same uid.
  const save = await c.cli(['checkpoint', 'mover', '-o', 'json']);
  assert.equal(save.code, 0, save.stderr);
  const saved = JSON.parse(save.stdout) as CheckpointView;
  assert.equal(saved.status?.phase, 'Saved');
  const afterSave = await askCounter(pod.status.podIP!, port);
  assertCarried(before, afterSave, 'after a Save checkpoint');
  const [still] = await getPods(c, ['-l', 'test=mover']);
  assert.equal(still!.metadata.uid, pod.metadata.uid, 'a Save does not replace the pod');

  // move --to the other worker.
  const other = pod.spec.nodeName === 'worker-1' ? 'worker-2' : 'worker-1';
  const mv = await c.cli(['move', 'mover', '--to', other]);
  assert.equal(mv.code, 0, `${mv.stdout}${mv.stderr}\n${logTails(c.dataDir)}`);
  assert.match(mv.stdout, new RegExp(`pod/mover moved from ${pod.spec.nodeName} to ${other}`));
  const moved = await movedTo(c, 'mover', other, pod.metadata.uid);
  const afterMove = await askCounter(moved.status.podIP!, port);
  assertCarried(afterSave, afterMove, 'after kube32-cli move');

  // move without --to: the scheduler picks, and never the node the pod runs on (here: the first one again).
  const back = await c.cli(['move', 'mover', '-o', 'json']);
  assert.equal(back.code, 0, `${back.stdout}${back.stderr}`);
  const backCkpt = JSON.parse(back.stdout) as CheckpointView;
  assert.equal(backCkpt.status?.phase, 'Completed');
  assert.equal(backCkpt.status?.targetNode, pod.spec.nodeName);
  const home = await movedTo(c, 'mover', pod.spec.nodeName!, moved.metadata.uid);
  assertCarried(afterMove, await askCounter(home.status.podIP!, port), 'after kube32-cli move without --to');

  // A pod with kube32.io/migration: Never is refused: exit 1, the blocker named, the pod where it was.
  const { pod: stay } = await counterPod(c, 'stayer', { annotations: { 'kube32.io/migration': 'Never' } });
  const refused = await c.cli(['move', 'stayer']);
  assert.equal(refused.code, 1, refused.stdout);
  assert.match(refused.stderr, /annotation kube32\.io\/migration: Never/);
  const [same] = await getPods(c, ['-l', 'test=stayer']);
  assert.equal(same!.metadata.uid, stay.metadata.uid);
  assert.ok(podReady(same));
  // The MoveFailed event follows the Failed status that ended the command: wait for it.
  await waitFor('the MoveFailed event of stayer', 30_000, async () => /MoveFailed/.test((await c.kubectl(['get', 'events', '--field-selector', 'involvedObject.name=stayer'])).stdout));
});

test('Auto under memory pressure: the pod leaves the node whose free heap runs short', { timeout: 300_000, skip: SKIP }, async (t) => {
  // worker-1's heap leaves less than 24 KiB free once a 64 KiB pod runs on it; worker-2 has room but is
  // cordoned until the pod has answered on worker-1, so that the move happens after the first requests.
  const c = await startCluster(t, { workers: 1, extraArgs: ['--worker-heap', '80Ki'] });
  t.after(() => {
    if (process.exitCode) console.error(logTails(c.dataDir));
  });
  await startWorker(t, c, { name: 'worker-2', address: nthAddress(c.firstAddress, 1) });
  const cordon = await c.kubectl(['cordon', 'worker-2']);
  assert.equal(cordon.code, 0, cordon.stderr);
  const { pod, port } = await counterPod(c, 'pressed', {
    annotations: { 'kube32.io/migration': 'Auto' },
    nodeName: 'worker-1',
    memory: '64Ki',
  });
  const before = await count(pod, port, 2);
  await waitFor('MemoryPressure on worker-1', 30_000, async () => {
    const r = await c.kubectl(['get', 'node', 'worker-1', '-o', 'jsonpath={.status.conditions[?(@.type=="MemoryPressure")].status}']);
    return r.stdout.trim() === 'True';
  });
  const uncordon = await c.kubectl(['uncordon', 'worker-2']);
  assert.equal(uncordon.code, 0, uncordon.stderr);
  // The policy looks again at most a minute after it found no target (one move per node per minute).
  const moved = await movedTo(c, 'pressed', 'worker-2', pod.metadata.uid, 150_000);
  // Completed is written once the replacement runs and its restore-from annotation is removed, a moment
  // after the pod reads Ready: wait for it.
  await waitFor('a Completed Checkpoint labelled kube32.io/trigger: memory-pressure', 30_000, async () =>
    (await checkpoints(c)).find((k) => k.metadata.labels?.['kube32.io/trigger'] === 'memory-pressure' && k.status?.phase === 'Completed'),
  );
  assertCarried(before, await askCounter(moved.status.podIP!, port), 'after the memory-pressure move');
});

test('a faster node joining: a placement: fastest pod moves to it', { timeout: 240_000, skip: SKIP }, async (t) => {
  const c = await startCluster(t, { workers: 1 });
  t.after(() => {
    if (process.exitCode) console.error(logTails(c.dataDir));
  });
  const { pod, port } = await counterPod(c, 'racer', {
    annotations: { 'kube32.io/migration': 'Auto', 'kube32.io/placement': 'fastest' },
  });
  assert.equal(pod.spec.nodeName, 'worker-1');
  const before = await count(pod, port, 2);
  const mops = await c.kubectl(['get', 'node', 'worker-1', '-o', 'jsonpath={.metadata.annotations.kube32\\.io/interp-mops}']);
  const slow = Number(mops.stdout.trim());
  assert.ok(slow > 0, `worker-1 reports kube32.io/interp-mops: ${mops.stdout}${mops.stderr}`);
  // Every worker here runs on the same CPU and measures about the same speed: the joining node reports
  // four times worker-1's (kube32-sim --interp-mops), as a faster computer would.
  await startWorker(t, c, { name: 'worker-2', address: nthAddress(c.firstAddress, 1), extraArgs: ['--interp-mops', String(slow * 4)] });
  const moved = await movedTo(c, 'racer', 'worker-2', pod.metadata.uid);
  // Completed is written a moment after the pod reads Ready (see above): wait for the Checkpoint to finish.
  const ck = await waitFor('the placement Checkpoint to finish', 30_000, async () => {
    const k = (await checkpoints(c)).find((x) => x.metadata.labels?.['kube32.io/trigger'] === 'placement');
    return k?.status?.phase === 'Completed' || k?.status?.phase === 'Failed' ? k : undefined;
  });
  assert.equal(ck.status?.phase, 'Completed', JSON.stringify(ck.status));
  assertCarried(before, await askCounter(moved.status.podIP!, port), 'after the move to the faster node');
});

test('a lost node: a pod with periodic checkpoints comes back on another node from its latest one', { timeout: 240_000, skip: SKIP }, async (t) => {
  // A node silent for 10 s turns Unknown, and its pods are evicted 10 s later (defaults: 40 s and 5 min).
  const c = await startCluster(t, {
    workers: 2,
    extraArgs: ['--node-monitor-grace-period', '15s', '--pod-eviction-timeout', '10s'],
  });
  t.after(() => {
    if (process.exitCode) console.error(logTails(c.dataDir));
  });
  const { pod, port } = await counterPod(c, 'survivor', { annotations: { 'kube32.io/checkpoint-interval': '10s' } });
  const lostNode = pod.spec.nodeName!;
  const other = lostNode === 'worker-1' ? 'worker-2' : 'worker-1';
  const before = await count(pod, port, 3);
  // A periodic checkpoint frozen after the last answer came back holds count = before.count (takenAt is
  // the controller's freeze time, by this computer's clock, in ms). One frozen a moment before may hold
  // an older count: a freeze between two requests makes no 503, so it cannot be told apart otherwise.
  const askedAt = Date.now();
  const afterRequests = (k: CheckpointView) =>
    k.spec.podName === 'survivor' && k.metadata.labels?.['kube32.io/trigger'] === 'periodic' && k.status?.phase === 'Saved' && Date.parse(k.status.takenAt ?? '') >= askedAt;
  // Every 10 s: the first one after the requests comes within 10 s, the next one 10 s later.
  const periodic = await waitFor('a Saved periodic checkpoint taken after the requests', 40_000, async () => (await checkpoints(c)).find(afterRequests));
  // The periodic checkpoints Saved after the requests, as the node is lost (the latest of them is restored).
  const savedBeforeLoss = (await checkpoints(c))
    .filter(afterRequests)
    .map((k) => k.metadata.name);
  // The node is lost: its worker dies without draining.
  process.kill(c.childPid(lostNode), 'SIGKILL');
  const back = await movedTo(c, 'survivor', other, pod.metadata.uid, 120_000);
  assertCarried(before, await askCounter(back.status.podIP!, port), 'after the restore from the periodic checkpoint');
  const periodicNames = (await checkpoints(c))
    .filter((k) => k.spec.podName === 'survivor' && k.metadata.labels?.['kube32.io/trigger'] === 'periodic')
    .map((k) => k.metadata.name);
  assert.ok(periodicNames.includes(periodic.metadata.name) || periodicNames.length > 0, 'the latest periodic checkpoint stays');
  // The Restored event goes with the removal of the restore-from annotation, a moment after the pod reads Ready: wait for it.
  const restored = await waitFor('a Restored event', 30_000, async () => {
    const events = await c.kubectl(['get', 'events', '--field-selector', 'involvedObject.name=survivor', '-o', 'json']);
    if (events.code !== 0) throw new Error(events.stderr);
    return (JSON.parse(events.stdout) as { items: { reason?: string; message?: string; source?: { component?: string } }[] }).items
      .find((e) => e.reason === 'Restored' && e.source?.component === 'kube32-controller-manager');
  });
  // It names a periodic checkpoint taken after the requests: one Saved as the node was lost, or one
  // Saved in the moment before the kill. (Once the pod runs again, newer periodic checkpoints replace it.)
  const candidates = [...new Set([...savedBeforeLoss, periodic.metadata.name, ...periodicNames])];
  assert.ok(
    candidates.some((n) => restored.message?.includes(`checkpoint ${n},`)),
    `the Restored event names a periodic checkpoint taken after the requests: ${restored.message} (candidates: ${candidates.join(', ')})`,
  );
});
