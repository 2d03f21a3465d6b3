/**
 * `batch/v1` Jobs with the real kubectl against a real cluster (API server, controllers, one kube32-sim
 * worker): app pods (a module whose `_start` returns, or traps) run to their end.
 *
 * - `kubectl create job` runs one pod to completion; `kubectl wait --for=condition=complete` succeeds;
 * - an applied Job with completions 2, parallelism 1 runs two pods one after the other, named `<job>-xxxxx`,
 *   owned by the Job; `kubectl get jobs` prints `Complete 2/2`; events SuccessfulCreate and Completed;
 *   `kubectl logs job/NAME` prints the pod's log;
 * - a module that traps with backoffLimit 1: two failed pods, then `Failed` with reason `BackoffLimitExceeded`;
 * - a template with restartPolicy Always is refused with Kubernetes' message; the template is immutable;
 * - `suspend: true` creates nothing until resumed; `activeDeadlineSeconds` fails the Job `DeadlineExceeded` and
 *   stops its pod; `ttlSecondsAfterFinished` deletes the finished Job and its pods;
 * - deleting the Job deletes its pods (garbage collector).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { type CoreV1Event, type V1Job, type V1Pod, Watch } from '@kubernetes/client-node';
import { startControllersCluster } from './cluster.ts';

/** An app pod that logs a line and returns from `_start` (exit 0). */
const OK_WAT = `(module
  (import "k32" "k32_log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "job step done")
  (func (export "_start") (call $log (i32.const 0) (i32.const 13))))`;

/** An app pod that traps in `_start` (the pod ends Failed). */
const FAIL_WAT = `(module
  (memory (export "memory") 1)
  (func (export "_start") unreachable))`;

test('Jobs: kubectl create job, completions 2 one at a time, backoff limit, refusals, deletion with the pods', { timeout: 180_000 }, async (t) => {
  const c = await startControllersCluster(t);
  const tmp = mkdtempSync(join(tmpdir(), 'k32-jobs-'));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));
  for (const [name, wat] of [['job-ok', OK_WAT], ['job-fail', FAIL_WAT]] as const) {
    writeFileSync(join(tmp, `${name}.wat`), wat);
    execFileSync('wat2wasm', [join(tmp, `${name}.wat`), '-o', join(tmp, `${name}.wasm`)]);
    const bytes = readFileSync(join(tmp, `${name}.wasm`));
    const res = await c.rest.request({ method: 'PUT', path: `/apis/kube32.io/v1/modules/${name}/data`, body: Readable.from([bytes]), contentType: 'application/octet-stream', contentLength: bytes.length });
    res.body.resume();
    assert.ok(res.status < 300, `pushing ${name}: ${res.status}`);
  }
  await c.startWorker('w1');

  const run = (args: string[], input?: string) => c.api.kubectl(args, input === undefined ? {} : { input });
  const kubectl = async (args: string[], input?: string) => {
    const r = await run(args, input);
    assert.equal(r.code, 0, `kubectl ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  const getJob = async (name: string) => JSON.parse(await kubectl(['get', 'job', name, '-o', 'json'])) as V1Job;
  const jobPods = async (name: string) =>
    (JSON.parse(await kubectl(['get', 'pods', '-l', `batch.kubernetes.io/job-name=${name}`, '-o', 'json'])) as { items: V1Pod[] }).items;

  // Discovery: kubectl finds jobs in batch/v1.
  assert.match(await kubectl(['api-resources', '--api-group=batch']), /^jobs\s+batch\/v1\s+true\s+Job$/m);

  // kubectl create job: one pod, restartPolicy Never, to completion.
  await kubectl(['create', 'job', 'once', '--image=job-ok']);
  await kubectl(['wait', '--for=condition=complete', 'job/once', '--timeout=60s']);
  const once = await getJob('once');
  assert.equal(once.status?.succeeded, 1);
  assert.equal(once.spec?.template.spec?.restartPolicy, 'Never');
  assert.equal(once.spec?.backoffLimit, 6);
  assert.equal(once.spec?.completionMode, 'NonIndexed');
  assert.deepEqual(once.spec?.selector?.matchLabels, { 'batch.kubernetes.io/controller-uid': once.metadata?.uid });
  assert.equal(once.spec?.template.metadata?.labels?.['job-name'], 'once');
  assert.equal(once.spec?.template.metadata?.labels?.['controller-uid'], once.metadata?.uid);

  // An applied Job: completions 2, parallelism 1. Its pods are watched from before it exists: at every event,
  // at most one of them may be unfinished. (Their timestamps are whole seconds: two pods created, or ended,
  // in one second tie, so no ordering of them by time can tell which ran first; the watch's order can.)
  const unfinished = new Map<string, boolean>();
  const twicePods = new Set<string>();
  let mostAtOnce = 0;
  let watchEnded: unknown;
  const watching = await new Watch(c.api.kubeConfig).watch(
    '/api/v1/namespaces/default/pods',
    { labelSelector: 'batch.kubernetes.io/job-name=twice' },
    (type: string, p: V1Pod) => {
      const name = p.metadata?.name ?? '';
      twicePods.add(name);
      if (type === 'DELETED') unfinished.delete(name);
      else unfinished.set(name, p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed');
      mostAtOnce = Math.max(mostAtOnce, [...unfinished.values()].filter(Boolean).length);
    },
    (err: unknown) => {
      watchEnded = err ?? 'the watch ended';
    },
  );
  t.after(() => watching.abort());
  const manifest = `apiVersion: batch/v1
kind: Job
metadata:
  name: twice
spec:
  completions: 2
  parallelism: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: step
        image: job-ok
`;
  await kubectl(['apply', '-f', '-'], manifest);
  await kubectl(['wait', '--for=condition=complete', 'job/twice', '--timeout=60s']);
  const twice = await getJob('twice');
  assert.equal(twice.status?.succeeded, 2);
  assert.equal(twice.status?.active ?? 0, 0);
  assert.ok(twice.status?.startTime && twice.status.completionTime, JSON.stringify(twice.status));
  const types = (twice.status?.conditions ?? []).filter((x) => x.status === 'True').map((x) => [x.type, x.reason]);
  assert.deepEqual(types, [['SuccessCriteriaMet', 'CompletionsReached'], ['Complete', 'CompletionsReached']]);
  const pods = await jobPods('twice');
  assert.equal(pods.length, 2);
  for (const p of pods) {
    assert.match(p.metadata?.name ?? '', /^twice-[a-z0-9]{5}$/);
    assert.equal(p.status?.phase, 'Succeeded');
    const ref = p.metadata?.ownerReferences?.[0];
    assert.deepEqual([ref?.kind, ref?.name, ref?.uid, ref?.controller], ['Job', 'twice', twice.metadata?.uid, true]);
  }
  // parallelism 1: the second pod was created only once the first had ended (the watch saw both, and never two unfinished).
  for (const p of pods) assert.ok(!Number.isNaN(Date.parse(String(p.status?.containerStatuses?.[0]?.state?.terminated?.finishedAt))), JSON.stringify(p.status));
  assert.equal(watchEnded, undefined, `the pods watch of job twice ended before the Job completed: ${String(watchEnded)}`);
  assert.deepEqual([...twicePods].sort(), pods.map((p) => p.metadata?.name).sort(), 'the watch saw both pods');
  assert.equal(mostAtOnce, 1, 'with parallelism 1 the second pod is created only after the first ended');

  const table = await kubectl(['get', 'jobs']);
  assert.match(table, /^NAME\s+STATUS\s+COMPLETIONS\s+DURATION\s+AGE$/m);
  // DURATION and AGE in kubectl's format: 59s, then 2m5s past two minutes (a loaded machine gets there).
  assert.match(table, /^twice\s+Complete\s+2\/2\s+(?:\d+[smhd])+\s+(?:\d+[smhd])+$/m);
  assert.match(table, /^once\s+Complete\s+1\/1\s+(?:\d+[smhd])+\s+(?:\d+[smhd])+$/m);

  const events = (JSON.parse(await kubectl(['get', 'events', '--field-selector', 'involvedObject.kind=Job,involvedObject.name=twice', '-o', 'json'])) as { items: CoreV1Event[] }).items;
  const created = events.filter((e) => e.reason === 'SuccessfulCreate').map((e) => e.message).sort();
  assert.deepEqual(created, pods.map((p) => `Created pod: ${p.metadata?.name}`).sort());
  assert.ok(events.some((e) => e.reason === 'Completed' && e.message === 'Job completed'), JSON.stringify(events.map((e) => [e.reason, e.message])));

  const wide = await kubectl(['get', 'jobs', 'twice', '-o', 'wide']);
  assert.match(wide, /^NAME\s+STATUS\s+COMPLETIONS\s+DURATION\s+AGE\s+CONTAINERS\s+IMAGES\s+SELECTOR$/m);
  assert.match(wide, new RegExp(`^twice\\s+Complete\\s+2/2\\s+\\S+\\s+\\S+\\s+step\\s+job-ok\\s+batch.kubernetes.io/controller-uid=${twice.metadata?.uid}$`, 'm'));
  const described = await kubectl(['describe', 'job', 'twice']);
  assert.match(described, /^Pods Statuses:\s+0 Active \(0 Ready\) \/ 2 Succeeded \/ 0 Failed$/m);
  assert.match(described, /Normal\s+Completed\s+\S+\s+job-controller\s+Job completed/);

  const logs = await kubectl(['logs', 'job/twice']);
  assert.match(logs, /job step done/);

  // A failing module with backoffLimit 1: two failed pods, then Failed BackoffLimitExceeded.
  await kubectl(
    ['apply', '-f', '-'],
    `apiVersion: batch/v1
kind: Job
metadata:
  name: broken
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: step
        image: job-fail
`,
  );
  await kubectl(['wait', '--for=condition=failed', 'job/broken', '--timeout=60s']);
  const broken = await getJob('broken');
  const failedCond = broken.status?.conditions?.find((x) => x.type === 'Failed');
  assert.equal(failedCond?.status, 'True');
  assert.equal(failedCond?.reason, 'BackoffLimitExceeded');
  assert.equal(failedCond?.message, 'Job has reached the specified backoff limit');
  assert.equal(broken.status?.failed, 2);
  assert.equal((await jobPods('broken')).length, 2);
  assert.match(await kubectl(['get', 'job', 'broken']), /^broken\s+Failed\s+0\/1\s+/m);

  // Refusals with Kubernetes' words.
  const always = await run(['create', '-f', '-'], manifest.replace('name: twice', 'name: always').replace('restartPolicy: Never', 'restartPolicy: Always'));
  assert.notEqual(always.code, 0);
  assert.match(always.stderr, /spec\.template\.spec\.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"/);
  const changed = await run(['patch', 'job', 'twice', '--type=merge', '-p', '{"spec":{"template":{"spec":{"containers":[{"name":"step","image":"job-fail"}]}}}}']);
  assert.notEqual(changed.code, 0);
  assert.match(changed.stderr, /spec\.template: Invalid value: .*field is immutable|spec\.template: Invalid value: field is immutable/);

  // suspend: true creates nothing until resumed.
  await kubectl(['apply', '-f', '-'], manifest.replace('name: twice', 'name: later').replace('completions: 2', 'completions: 1\n  suspend: true'));
  const suspended = await c.until('job later to be Suspended', async () => {
    const j = await getJob('later');
    return j.status?.conditions?.some((x) => x.type === 'Suspended' && x.status === 'True' && x.reason === 'JobSuspended') ? j : undefined;
  });
  assert.equal(suspended.status?.startTime, undefined);
  assert.equal((await jobPods('later')).length, 0);
  assert.match(await kubectl(['get', 'job', 'later']), /^later\s+Suspended\s+0\/1\s+/m);
  await kubectl(['patch', 'job', 'later', '--type=merge', '-p', '{"spec":{"suspend":false}}']);
  await kubectl(['wait', '--for=condition=complete', 'job/later', '--timeout=60s']);
  const resumed = (await getJob('later')).status?.conditions?.find((x) => x.type === 'Suspended');
  assert.deepEqual([resumed?.status, resumed?.reason], ['False', 'JobResumed']);

  // activeDeadlineSeconds: a pod that never ends (the counter request pod) is stopped, the Job Failed DeadlineExceeded.
  await kubectl(
    ['apply', '-f', '-'],
    `apiVersion: batch/v1
kind: Job
metadata:
  name: endless
spec:
  activeDeadlineSeconds: 2
  template:
    spec:
      restartPolicy: OnFailure
      containers:
      - name: serve
        image: counter-fixture
`,
  );
  await kubectl(['wait', '--for=condition=failed', 'job/endless', '--timeout=60s']);
  const endless = await getJob('endless');
  const deadline = endless.status?.conditions?.find((x) => x.type === 'Failed');
  assert.deepEqual([deadline?.reason, deadline?.message], ['DeadlineExceeded', 'Job was active longer than specified deadline']);
  assert.equal(endless.status?.active ?? 0, 0);
  await c.until('the pods of job endless to be gone', async () => (await jobPods('endless')).length === 0, 30_000);

  // ttlSecondsAfterFinished: the finished Job goes, with its pods.
  await kubectl(['apply', '-f', '-'], manifest.replace('name: twice', 'name: brief').replace('completions: 2', 'completions: 1\n  ttlSecondsAfterFinished: 1'));
  await c.until('job brief to be deleted after it finished', async () => {
    const r = await run(['get', 'job', 'brief']);
    return r.code !== 0 && /NotFound|not found/.test(r.stderr);
  }, 60_000);
  await c.until('the pods of job brief to be gone', async () => (await jobPods('brief')).length === 0, 30_000);

  // Deleting the Job deletes its pods.
  await kubectl(['delete', 'job', 'twice', '--wait=true']);
  await c.until('the pods of job twice to be deleted', async () => (await jobPods('twice')).length === 0, 30_000);
  assert.equal((await jobPods('once')).length, 1, 'the other Job keeps its pod');
});
