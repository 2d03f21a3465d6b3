import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1CronJob, V1Job } from '@kubernetes/client-node';
import { ApiError } from '../../api/index.ts';
import { FakeLister, fakeContext } from '../testing/fakes.ts';
import { metaTime } from '../jobs/reconcile.ts';
import { type CronJobApi, reconcileCronJob, SCHEDULED_TIMESTAMP_ANNOTATION } from './reconcile.ts';

const MINUTE = 60_000;
/** The fake clock's start (1_700_000_000_000) is 22:13:20 UTC; the CronJob was created 10 s after 22:13. */
const CREATED = 1_700_000_000_000 - 10_000;
const NEXT_MINUTE = 1_700_000_040_000; // 22:14:00

function cronJob(spec: Partial<NonNullable<V1CronJob['spec']>> = {}, status: V1CronJob['status'] = {}): V1CronJob {
  return {
    apiVersion: 'batch/v1',
    kind: 'CronJob',
    metadata: { name: 'tick', namespace: 'default', uid: 'uid-tick', creationTimestamp: metaTime(CREATED) as unknown as Date },
    spec: {
      schedule: '*/1 * * * *',
      concurrencyPolicy: 'Allow',
      suspend: false,
      successfulJobsHistoryLimit: 3,
      failedJobsHistoryLimit: 1,
      jobTemplate: {
        metadata: { labels: { app: 'tick' }, annotations: { note: 'kept' } },
        spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'step', image: 'job-ok' }] } } },
      },
      ...spec,
    },
    status,
  };
}

/** A Job of the CronJob: running, or finished Complete / Failed at `endMs`. */
function ownedJob(name: string, state: 'Running' | 'Complete' | 'Failed', startMs = CREATED, endMs = startMs + 5000): V1Job {
  const conditions = state === 'Running' ? [] : [{ type: state, status: 'True', lastTransitionTime: metaTime(endMs) as unknown as Date }];
  return {
    metadata: {
      name,
      namespace: 'default',
      uid: `uid-${name}`,
      ownerReferences: [{ apiVersion: 'batch/v1', kind: 'CronJob', name: 'tick', uid: 'uid-tick', controller: true }],
    },
    status: {
      startTime: metaTime(startMs) as unknown as Date,
      ...(state === 'Complete' ? { completionTime: metaTime(endMs) as unknown as Date } : {}),
      conditions: conditions as never,
    },
  };
}

const ref = (name: string) => ({ apiVersion: 'batch/v1', kind: 'Job', namespace: 'default', name, uid: `uid-${name}` });

/** The caches, a recording CronJob API that keeps them up to date, and one sync. */
function setup(cj: V1CronJob, jobList: V1Job[] = []) {
  const f = fakeContext();
  const cronJobs = new FakeLister<V1CronJob>();
  cronJobs.set(cj);
  const jobs = new FakeLister<V1Job>();
  for (const j of jobList) jobs.set(j);
  const calls: string[] = [];
  const created: V1Job[] = [];
  const failures = new Map<string, ApiError>();
  /** Jobs the server has and the cache does not show yet. */
  const serverOnly = new Map<string, V1Job>();
  const fail = (op: string) => {
    const e = failures.get(op);
    if (e) {
      failures.delete(op);
      throw e;
    }
  };
  const api: CronJobApi = {
    async getCronJob(_ns, name) {
      calls.push(`getCronJob ${name}`);
      return cronJobs.get(name, 'default');
    },
    async patchCronJobStatus(_ns, name, patch) {
      calls.push(`patchCronJobStatus ${name}`);
      const cur = cronJobs.get(name, 'default')!;
      const next = { ...(cur.status ?? {}) } as Record<string, unknown>;
      for (const [k, v] of Object.entries(patch.status as Record<string, unknown>)) {
        if (v === null) delete next[k];
        else next[k] = v;
      }
      cronJobs.set({ ...cur, status: next });
    },
    async createJob(_ns, job) {
      calls.push(`createJob ${job.metadata?.name}`);
      fail('createJob');
      const made = structuredClone(job);
      made.metadata = { ...made.metadata, namespace: 'default', uid: `uid-${job.metadata?.name}` };
      created.push(made);
      jobs.set(made);
      return made;
    },
    async getJob(_ns, name) {
      calls.push(`getJob ${name}`);
      return serverOnly.get(name) ?? jobs.get(name, 'default');
    },
    async deleteJob(_ns, name) {
      calls.push(`deleteJob ${name}`);
      jobs.remove(name, 'default');
    },
  };
  const sync = () => reconcileCronJob('default/tick', f.ctx, cronJobs, jobs, api);
  const status = () => cronJobs.get('tick', 'default')!.status ?? {};
  return { ...f, cronJobs, jobs, calls, created, failures, serverOnly, sync, status };
}

test('before the first schedule time nothing is created, and the key comes back at that time (+100 ms)', { timeout: 5000 }, async () => {
  const s = setup(cronJob());
  const r = await s.sync();
  assert.deepEqual(s.calls, []);
  assert.equal(r?.requeueAfterMs, NEXT_MINUTE + 100 - s.clock.now());
});

test('a due schedule time makes Job <cronjob>-<minutes>, controlled by the CronJob, in status.active with lastScheduleTime', { timeout: 5000 }, async () => {
  const s = setup(cronJob());
  s.clock.advance(NEXT_MINUTE + 1500 - s.clock.now());
  const r = await s.sync();
  const name = `tick-${NEXT_MINUTE / MINUTE}`;
  assert.deepEqual(s.calls, [`createJob ${name}`, 'patchCronJobStatus tick']);
  const job = s.created[0]!;
  assert.deepEqual(job.metadata?.labels, { app: 'tick' });
  assert.deepEqual(job.metadata?.annotations, { note: 'kept', [SCHEDULED_TIMESTAMP_ANNOTATION]: '2023-11-14T22:14:00Z' });
  assert.deepEqual(job.metadata?.ownerReferences, [{ apiVersion: 'batch/v1', kind: 'CronJob', name: 'tick', uid: 'uid-tick', controller: true, blockOwnerDeletion: true }]);
  assert.equal(job.spec?.template.spec?.containers[0]?.image, 'job-ok');
  assert.deepEqual(s.status().active?.map((a) => a.name), [name]);
  assert.equal(s.status().lastScheduleTime, metaTime(NEXT_MINUTE));
  assert.deepEqual(s.fake.eventReasons, ['SuccessfulCreate']);
  assert.equal(s.fake.eventMessage('SuccessfulCreate'), `Created job ${name}`);
  assert.equal(r?.requeueAfterMs, NEXT_MINUTE + MINUTE + 100 - s.clock.now());
  // Again at the same time: that schedule time is done.
  s.calls.length = 0;
  await s.sync();
  assert.deepEqual(s.calls, []);
});

test('a finished Job leaves status.active (SawCompletedJob) and a succeeded one sets lastSuccessfulTime', { timeout: 5000 }, async () => {
  const s = setup(cronJob({}, { active: [ref('tick-1')], lastScheduleTime: metaTime(CREATED) as unknown as Date }), [ownedJob('tick-1', 'Complete', CREATED, CREATED + 3000)]);
  await s.sync();
  assert.equal(s.status().active, undefined);
  assert.equal(s.status().lastSuccessfulTime, metaTime(CREATED + 3000));
  assert.deepEqual(s.fake.eventReasons, ['SawCompletedJob']);
  assert.equal(s.fake.eventMessage('SawCompletedJob'), 'Saw completed job: tick-1, condition: Complete');
});

test('concurrencyPolicy Forbid skips a due time while a Job runs (JobAlreadyActive); Replace deletes it and starts the new one', { timeout: 5000 }, async () => {
  const running = () => ownedJob('tick-1', 'Running');
  const forbid = setup(cronJob({ concurrencyPolicy: 'Forbid' }, { active: [ref('tick-1')] }), [running()]);
  forbid.clock.advance(NEXT_MINUTE - forbid.clock.now());
  await forbid.sync();
  assert.deepEqual(forbid.calls, []);
  assert.deepEqual(forbid.fake.eventReasons, ['JobAlreadyActive']);
  assert.equal(forbid.fake.eventMessage('JobAlreadyActive'), 'Not starting job because prior execution is running and concurrency policy is Forbid');

  const replace = setup(cronJob({ concurrencyPolicy: 'Replace' }, { active: [ref('tick-1')] }), [running()]);
  replace.clock.advance(NEXT_MINUTE - replace.clock.now());
  await replace.sync();
  const name = `tick-${NEXT_MINUTE / MINUTE}`;
  assert.deepEqual(replace.calls, ['getJob tick-1', 'deleteJob tick-1', `createJob ${name}`, 'patchCronJobStatus tick']);
  assert.deepEqual(replace.fake.eventReasons, ['SuccessfulDelete', 'SuccessfulCreate']);
  assert.equal(replace.fake.eventMessage('SuccessfulDelete'), 'Deleted job tick-1');
  assert.deepEqual(replace.status().active?.map((a) => a.name), [name]);

  const allow = setup(cronJob({}, { active: [ref('tick-1')] }), [running()]);
  allow.clock.advance(NEXT_MINUTE - allow.clock.now());
  await allow.sync();
  assert.deepEqual(allow.status().active?.map((a) => a.name), ['tick-1', name]);
});

test('a suspended CronJob starts nothing and is not requeued', { timeout: 5000 }, async () => {
  const s = setup(cronJob({ suspend: true }));
  s.clock.advance(10 * MINUTE);
  assert.equal(await s.sync(), undefined);
  assert.deepEqual(s.calls, []);
});

test('startingDeadlineSeconds: a time missed by more than the deadline is not started; the next one is', { timeout: 5000 }, async () => {
  const s = setup(cronJob({ startingDeadlineSeconds: 10 }));
  s.clock.advance(NEXT_MINUTE + 30_000 - s.clock.now());
  const r = await s.sync();
  assert.deepEqual(s.calls, []);
  assert.equal(r?.requeueAfterMs, NEXT_MINUTE + MINUTE + 100 - s.clock.now());
  s.clock.advance(r!.requeueAfterMs!);
  await s.sync();
  assert.deepEqual(s.calls, [`createJob tick-${NEXT_MINUTE / MINUTE + 1}`, 'patchCronJobStatus tick']);
});

test('more than 100 missed times: TooManyMissedTimes, and only the latest is started', { timeout: 5000 }, async () => {
  const s = setup(cronJob());
  s.clock.advance(150 * MINUTE);
  await s.sync();
  const latest = Math.floor(s.clock.now() / MINUTE);
  assert.deepEqual(s.calls, [`createJob tick-${latest}`, 'patchCronJobStatus tick']);
  assert.deepEqual(s.fake.eventReasons, ['TooManyMissedTimes', 'SuccessfulCreate']);
  assert.equal(s.fake.eventMessage('TooManyMissedTimes'), 'too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew');
});

test('history limits delete the oldest finished Jobs beyond them (SuccessfulDelete), running ones are kept', { timeout: 5000 }, async () => {
  const s = setup(cronJob({ successfulJobsHistoryLimit: 1, failedJobsHistoryLimit: 0 }, { lastScheduleTime: metaTime(NEXT_MINUTE) as unknown as Date }), [
    ownedJob('tick-c', 'Complete', CREATED + 3000),
    ownedJob('tick-a', 'Complete', CREATED + 1000),
    ownedJob('tick-b', 'Complete', CREATED + 2000),
    ownedJob('tick-f', 'Failed', CREATED),
    ownedJob('tick-r', 'Running', CREATED),
  ]);
  await s.sync();
  assert.deepEqual(s.calls.filter((c) => c.startsWith('deleteJob')), ['deleteJob tick-a', 'deleteJob tick-b', 'deleteJob tick-f']);
  assert.deepEqual(s.jobs.items.map((j) => j.metadata?.name).sort(), ['tick-c', 'tick-r']);
  assert.deepEqual(s.fake.eventReasons.filter((r) => r === 'SuccessfulDelete').length, 3);
});

test('an unfinished Job the status does not list is reported after a fresh read (UnexpectedJob); a listed Job gone leaves it (MissingJob)', { timeout: 5000 }, async () => {
  const s = setup(cronJob({}, { active: [ref('tick-gone')], lastScheduleTime: metaTime(NEXT_MINUTE) as unknown as Date }), [ownedJob('manual', 'Running')]);
  await s.sync();
  assert.deepEqual(s.calls, ['getCronJob tick', 'getJob tick-gone', 'patchCronJobStatus tick']);
  assert.deepEqual(s.fake.eventReasons, ['UnexpectedJob', 'MissingJob']);
  assert.equal(s.fake.eventMessage('UnexpectedJob'), 'Saw a job that the controller did not create or forgot: manual');
  assert.equal(s.fake.eventMessage('MissingJob'), 'Active job went missing: tick-gone');
  assert.equal(s.status().active, undefined);
});

test('a cache older than the last status write: the Job already made is taken as made, with no second create event', { timeout: 5000 }, async () => {
  const s = setup(cronJob());
  s.clock.advance(NEXT_MINUTE - s.clock.now());
  const name = `tick-${NEXT_MINUTE / MINUTE}`;
  // The Job exists (made by a sync whose status write and Job the caches do not show yet).
  s.serverOnly.set(name, ownedJob(name, 'Running', NEXT_MINUTE));
  s.failures.set('createJob', new ApiError('create job', 409, 'AlreadyExists', `jobs.batch "${name}" already exists`));
  const r = await s.sync();
  assert.deepEqual(s.calls, [`createJob ${name}`, `getJob ${name}`, 'patchCronJobStatus tick']);
  assert.deepEqual(s.fake.eventReasons, []);
  assert.deepEqual(s.status().active?.map((a) => a.name), [name]);
  assert.equal(s.status().lastScheduleTime, metaTime(NEXT_MINUTE));
  assert.ok(r?.requeueAfterMs);
});

test('timeZone: fields are read in the zone, and the annotation carries its offset', { timeout: 5000 }, async () => {
  // 09:00 in Tokyo is 00:00 UTC.
  const s = setup(cronJob({ schedule: '0 9 * * *', timeZone: 'Asia/Tokyo' }));
  const midnight = Date.parse('2023-11-15T00:00:00Z');
  s.clock.advance(midnight + 5000 - s.clock.now());
  await s.sync();
  assert.deepEqual(s.calls, [`createJob tick-${midnight / MINUTE}`, 'patchCronJobStatus tick']);
  assert.equal(s.created[0]?.metadata?.annotations?.[SCHEDULED_TIMESTAMP_ANNOTATION], '2023-11-15T09:00:00+09:00');
});

test('a Job create refused by the API server: FailedCreate with its words, the error thrown for back-off', { timeout: 5000 }, async () => {
  const s = setup(cronJob());
  s.clock.advance(NEXT_MINUTE - s.clock.now());
  s.failures.set('createJob', new ApiError('create job', 403, 'Forbidden', 'quota', { message: 'jobs.batch "x" is forbidden: exceeded quota' }));
  await assert.rejects(s.sync(), /403 Forbidden/);
  assert.deepEqual(s.fake.eventReasons, ['FailedCreate']);
  assert.equal(s.fake.eventMessage('FailedCreate'), 'Error creating job: jobs.batch "x" is forbidden: exceeded quota');
  assert.equal(s.status().lastScheduleTime, undefined);
});

test('a second sync from a cache that still lists the finished Job as active records SawCompletedJob once', { timeout: 5000 }, async () => {
  const stale = cronJob({}, { active: [ref('tick-2')], lastScheduleTime: metaTime(CREATED) as unknown as Date });
  stale.metadata!.uid = 'uid-tick-stale';
  const job = ownedJob('tick-2', 'Complete', CREATED, CREATED + 3000);
  job.metadata!.ownerReferences![0]!.uid = 'uid-tick-stale';
  const s = setup(stale, [job]);
  await s.sync();
  s.cronJobs.set(stale);
  await s.sync();
  assert.deepEqual(s.fake.eventReasons, ['SawCompletedJob']);
});

test('a stored CronJob whose zone or schedule no longer reads starts nothing and says why (UnknownTimeZone, UnparseableSchedule)', { timeout: 5000 }, async () => {
  const zone = setup(cronJob({ timeZone: 'Mars/Olympus' }));
  zone.clock.advance(10 * MINUTE);
  assert.equal(await zone.sync(), undefined);
  assert.deepEqual(zone.calls, []);
  assert.deepEqual(zone.fake.eventReasons, ['UnknownTimeZone']);
  assert.equal(zone.fake.eventMessage('UnknownTimeZone'), 'invalid timeZone: "Mars/Olympus": unknown time zone Mars/Olympus');
  const bad = setup(cronJob({ schedule: '* * *' }));
  bad.clock.advance(10 * MINUTE);
  assert.equal(await bad.sync(), undefined);
  assert.deepEqual(bad.calls, []);
  assert.equal(bad.fake.eventMessage('UnparseableSchedule'), 'unparseable schedule: "* * *" : expected exactly 5 fields, found 3: [* * *]');
});

test('a CronJob being deleted starts no new Job but still tidies its status', { timeout: 5000 }, async () => {
  const cj = cronJob({}, { active: [ref('tick-1')] });
  cj.metadata!.deletionTimestamp = new Date(CREATED + 1000);
  const s = setup(cj, [ownedJob('tick-1', 'Failed', CREATED)]);
  s.clock.advance(10 * MINUTE);
  assert.equal(await s.sync(), undefined);
  assert.deepEqual(s.calls, ['patchCronJobStatus tick']);
  assert.equal(s.status().active, undefined);
});
