import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Job, V1Pod } from '@kubernetes/client-node';
import { FakeLister, fakeContext, pod } from '../testing/fakes.ts';
import { Expectations } from '../workloads/replicaset.ts';
import { type JobApi, metaTime, reconcileJob } from './reconcile.ts';

function job(spec: V1Job['spec'] extends infer S ? Partial<NonNullable<S>> : never = {}, status: V1Job['status'] = {}): V1Job {
  return {
    metadata: { name: 'work', namespace: 'default', uid: 'uid-work' },
    spec: {
      completions: 1,
      parallelism: 1,
      backoffLimit: 6,
      selector: { matchLabels: { 'batch.kubernetes.io/controller-uid': 'uid-work' } },
      template: { metadata: { labels: { 'batch.kubernetes.io/job-name': 'work' } }, spec: { restartPolicy: 'Never', containers: [{ name: 'step', image: 'job-ok' }] } },
      ...spec,
    },
    status,
  };
}

const jobPod = (name: string, phase: 'Running' | 'Succeeded' | 'Failed'): V1Pod => {
  const p = pod(name, { owner: { kind: 'Job', name: 'work', uid: 'uid-work' }, running: phase === 'Running', nodeName: 'a' });
  if (phase !== 'Running') p.status = { phase };
  return p;
};

/** The Job lister, the recording Job API and the last status written. */
function setup(j: V1Job) {
  const f = fakeContext();
  const jobs = new FakeLister<V1Job>();
  jobs.set(j);
  const patches: Record<string, unknown>[] = [];
  const deleted: string[] = [];
  const api: JobApi = {
    async patchJobStatus(_ns, _name, patch) {
      const st = patch.status as Record<string, unknown>;
      patches.push(st);
      const cur = jobs.get('work', 'default')!;
      const next = { ...(cur.status ?? {}) } as Record<string, unknown>;
      for (const [k, v] of Object.entries(st)) if (v === null) delete next[k];
      else next[k] = v;
      jobs.set({ ...cur, status: next });
    },
    async deleteJob(ns, name, uid) {
      deleted.push(`${ns}/${name}/${uid}`);
    },
  };
  const exp = new Expectations();
  const sync = () => reconcileJob('default/work', f.ctx, jobs, api, exp);
  const status = () => jobs.get('work', 'default')!.status!;
  return { ...f, jobs, patches, deleted, sync, status };
}

const trueConditions = (j: V1Job['status']) => (j?.conditions ?? []).filter((c) => c.status === 'True').map((c) => [c.type, c.reason]);

test('a Job creates at most parallelism pods, never more than the completions missing, named after it and owned by it', { timeout: 5000 }, async () => {
  const s = setup(job({ completions: 3, parallelism: 2 }));
  await s.sync();
  await s.sync();
  const creates = s.fake.writes.filter((c) => c.op === 'createPod');
  assert.equal(creates.length, 2, 'parallelism 2, and the second sync counts what the first created');
  const created = creates[0]!.args[1] as V1Pod;
  assert.equal(created.metadata?.generateName, 'work-');
  assert.deepEqual(created.metadata?.labels, { 'batch.kubernetes.io/job-name': 'work' });
  assert.deepEqual(created.metadata?.ownerReferences, [{ apiVersion: 'batch/v1', kind: 'Job', name: 'work', uid: 'uid-work', controller: true, blockOwnerDeletion: true }]);
  assert.equal(s.status().startTime, metaTime(s.clock.now()));
  assert.equal(s.status().active, 2);
});

test('with completions reached and no pod running: SuccessCriteriaMet, Complete, completionTime, the Completed event', { timeout: 5000 }, async () => {
  const s = setup(job({ completions: 2 }, { startTime: metaTime(1_699_999_990_000) as unknown as Date }));
  s.cache.pods.set(jobPod('work-aaaaa', 'Succeeded'));
  s.cache.pods.set(jobPod('work-bbbbb', 'Succeeded'));
  await s.sync();
  assert.deepEqual(trueConditions(s.status()), [['SuccessCriteriaMet', 'CompletionsReached'], ['Complete', 'CompletionsReached']]);
  assert.equal(s.status().succeeded, 2);
  assert.equal(s.status().completionTime, metaTime(s.clock.now()));
  assert.deepEqual(s.fake.writes.filter((c) => c.op === 'createPod'), []);
  const events = s.fake.calls.filter((c) => c.op === 'createEvent').map((c) => c.args[1] as { reason: string; message: string });
  assert.ok(events.some((e) => e.reason === 'Completed' && e.message === 'Job completed'));
  // Finished: nothing more happens.
  const before = s.fake.writes.length;
  await s.sync();
  assert.equal(s.fake.writes.length, before);
});

test('more failed pods than backoffLimit: FailureTarget and Failed BackoffLimitExceeded, no new pod', { timeout: 5000 }, async () => {
  const s = setup(job({ backoffLimit: 1 }));
  s.cache.pods.set(jobPod('work-aaaaa', 'Failed'));
  await s.sync();
  assert.equal(s.fake.writes.filter((c) => c.op === 'createPod').length, 1, 'one failure is within the limit: a new pod');
  s.cache.pods.set(jobPod('work-bbbbb', 'Failed'));
  await s.sync();
  assert.deepEqual(trueConditions(s.status()), [['FailureTarget', 'BackoffLimitExceeded'], ['Failed', 'BackoffLimitExceeded']]);
  assert.equal(s.status().failed, 2);
  assert.equal(s.fake.writes.filter((c) => c.op === 'createPod').length, 1);
});

test('activeDeadlineSeconds: requeued for the deadline, then the running pod deleted and Failed once it is gone', { timeout: 5000 }, async () => {
  const s = setup(job({ activeDeadlineSeconds: 10 }));
  s.cache.pods.set(jobPod('work-aaaaa', 'Running'));
  const first = await s.sync();
  assert.equal(first?.requeueAfterMs, 10_000);
  s.clock.advance(10_000);
  await s.sync();
  assert.deepEqual(s.fake.writes.filter((c) => c.op === 'deletePod').map((c) => c.args[1]), ['work-aaaaa']);
  assert.deepEqual(trueConditions(s.status()), [['FailureTarget', 'DeadlineExceeded']], 'Failed waits for the pod to go');
  s.cache.pods.remove('work-aaaaa', 'default');
  await s.sync();
  assert.deepEqual(trueConditions(s.status()), [['FailureTarget', 'DeadlineExceeded'], ['Failed', 'DeadlineExceeded']]);
  assert.equal(s.status().active, undefined);
});

test('suspend deletes the active pods and creates none; resuming creates them again', { timeout: 5000 }, async () => {
  const s = setup(job({ suspend: true }, { startTime: metaTime(1_699_999_990_000) as unknown as Date }));
  s.cache.pods.set(jobPod('work-aaaaa', 'Running'));
  await s.sync();
  assert.deepEqual(s.fake.writes.filter((c) => c.op === 'deletePod').map((c) => c.args[1]), ['work-aaaaa']);
  assert.deepEqual(trueConditions(s.status()), [['Suspended', 'JobSuspended']]);
  assert.equal(s.status().startTime, undefined);
  s.cache.pods.remove('work-aaaaa', 'default');
  s.jobs.set({ ...s.jobs.get('work', 'default')!, spec: { ...job().spec!, suspend: false } });
  await s.sync();
  assert.equal(s.fake.writes.filter((c) => c.op === 'createPod').length, 1);
  const cond = s.status().conditions?.find((c) => c.type === 'Suspended');
  assert.deepEqual([cond?.status, cond?.reason], ['False', 'JobResumed']);
});

test('ttlSecondsAfterFinished: the finished Job is deleted once its time is up', { timeout: 5000 }, async () => {
  const done = metaTime(1_700_000_000_000);
  const s = setup(job({ ttlSecondsAfterFinished: 30 }, { completionTime: done as unknown as Date, conditions: [{ type: 'Complete', status: 'True' }] }));
  assert.deepEqual(await s.sync(), { requeueAfterMs: 30_000 });
  assert.deepEqual(s.deleted, []);
  s.clock.advance(30_000);
  await s.sync();
  assert.deepEqual(s.deleted, ['default/work/uid-work']);
});

test('a work queue (parallelism, no completions): after one pod succeeds the running ones are left to finish; it completes when none runs', { timeout: 5000 }, async () => {
  const s = setup(job({ completions: undefined, parallelism: 3 }, { startTime: metaTime(1_699_999_990_000) as unknown as Date }));
  s.cache.pods.set(jobPod('work-aaaaa', 'Succeeded'));
  s.cache.pods.set(jobPod('work-bbbbb', 'Running'));
  s.cache.pods.set(jobPod('work-ccccc', 'Running'));
  await s.sync();
  assert.deepEqual(s.fake.writes.filter((c) => c.op === 'createPod' || c.op === 'deletePod'), [], 'no pod created, none deleted');
  assert.deepEqual(trueConditions(s.status()), []);
  s.cache.pods.set(jobPod('work-bbbbb', 'Succeeded'));
  s.cache.pods.set(jobPod('work-ccccc', 'Succeeded'));
  await s.sync();
  assert.deepEqual(trueConditions(s.status()), [['SuccessCriteriaMet', 'CompletionsReached'], ['Complete', 'CompletionsReached']]);
  assert.equal(s.status().succeeded, 3);
});
