/**
 * `batch/v1` CronJobs with the real kubectl against a real cluster (API server, controllers, one kube32-sim
 * worker), on the real clock. A schedule due within the run is `@every 3s` (robfig's descriptor, which
 * Kubernetes accepts), so nothing waits for a minute boundary:
 *
 * - discovery (`cronjobs`, short name `cj`), `kubectl create cronjob` (protobuf body) with its defaults,
 *   `kubectl get cronjobs` columns, `kubectl explain cronjob.spec`, `kubectl patch` of `suspend`;
 * - refusals with Kubernetes' words (TZ in the schedule, a schedule that does not parse, an unknown zone);
 * - a due schedule makes Job `<cronjob>-<minutes since the epoch>`, controlled by the CronJob, with the
 *   scheduled-timestamp annotation; status active, lastScheduleTime, then lastSuccessfulTime; events
 *   SuccessfulCreate and SawCompletedJob; `kubectl describe cronjob`;
 * - `kubectl create job --from=cronjob/X` (the manual annotation, the owner) and successfulJobsHistoryLimit 1:
 *   the oldest finished Job is deleted (SuccessfulDelete).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import type { CoreV1Event, V1CronJob, V1Job } from '@kubernetes/client-node';
import { startControllersCluster } from './cluster.ts';

/** An app pod that logs a line and returns from `_start` (exit 0). */
const OK_WAT = `(module
  (import "k32" "k32_log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "cron step done")
  (func (export "_start") (call $log (i32.const 0) (i32.const 14))))`;

test('CronJobs: kubectl create/get/patch/explain, refusals, a due schedule runs a Job, create job --from, history limit', { timeout: 90_000 }, async (t) => {
  const c = await startControllersCluster(t);
  const tmp = mkdtempSync(join(tmpdir(), 'k32-cronjobs-'));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));
  writeFileSync(join(tmp, 'cron-ok.wat'), OK_WAT);
  execFileSync('wat2wasm', [join(tmp, 'cron-ok.wat'), '-o', join(tmp, 'cron-ok.wasm')]);
  const bytes = readFileSync(join(tmp, 'cron-ok.wasm'));
  const res = await c.rest.request({ method: 'PUT', path: '/apis/kube32.io/v1/modules/cron-ok/data', body: Readable.from([bytes]), contentType: 'application/octet-stream', contentLength: bytes.length });
  res.body.resume();
  assert.ok(res.status < 300, `pushing cron-ok: ${res.status}`);
  await c.startWorker('w1');

  const run = (args: string[], input?: string) => c.api.kubectl(args, input === undefined ? {} : { input });
  const kubectl = async (args: string[], input?: string) => {
    const r = await run(args, input);
    assert.equal(r.code, 0, `kubectl ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  const getCronJob = async (name: string) => JSON.parse(await kubectl(['get', 'cronjob', name, '-o', 'json'])) as V1CronJob;
  const ownedJobs = async (cj: V1CronJob) =>
    (JSON.parse(await kubectl(['get', 'jobs', '-o', 'json'])) as { items: V1Job[] }).items.filter((j) =>
      j.metadata?.ownerReferences?.some((r) => r.controller && r.kind === 'CronJob' && r.uid === cj.metadata?.uid),
    );
  const events = async (name: string) =>
    (JSON.parse(await kubectl(['get', 'events', '--field-selector', `involvedObject.kind=CronJob,involvedObject.name=${name}`, '-o', 'json'])) as { items: CoreV1Event[] }).items;

  // Discovery: kubectl finds cronjobs in batch/v1, with its short name.
  assert.match(await kubectl(['api-resources', '--api-group=batch']), /^cronjobs\s+cj\s+batch\/v1\s+true\s+CronJob$/m);

  // kubectl create cronjob: the defaults, the columns; suspended by a patch.
  await kubectl(['create', 'cronjob', 'tick', '--image=cron-ok', '--schedule=*/1 * * * *']);
  const tick = await getCronJob('tick');
  assert.equal(tick.spec?.schedule, '*/1 * * * *');
  assert.equal(tick.spec?.concurrencyPolicy, 'Allow');
  assert.equal(tick.spec?.suspend, false);
  assert.equal(tick.spec?.successfulJobsHistoryLimit, 3);
  assert.equal(tick.spec?.failedJobsHistoryLimit, 1);
  assert.equal(tick.spec?.jobTemplate.spec?.template.spec?.restartPolicy, 'OnFailure');
  assert.equal(tick.spec?.jobTemplate.spec?.template.spec?.containers[0]?.image, 'cron-ok');
  const table = await kubectl(['get', 'cronjobs']);
  assert.match(table, /^NAME\s+SCHEDULE\s+TIMEZONE\s+SUSPEND\s+ACTIVE\s+LAST SCHEDULE\s+AGE$/m);
  assert.match(table, /^tick\s+\*\/1 \* \* \* \*\s+<none>\s+False\s+\d+\s+\S+\s+\d+s$/m);
  await kubectl(['patch', 'cronjob', 'tick', '-p', '{"spec":{"suspend":true}}']);
  assert.match(await kubectl(['get', 'cj', 'tick']), /^tick\s+\*\/1 \* \* \* \*\s+<none>\s+True\s+/m);
  assert.match(await kubectl(['explain', 'cronjob.spec']), /schedule\s+<string> -required-/);

  // Refusals with Kubernetes' words.
  const tz = await run(['create', 'cronjob', 'tz', '--image=cron-ok', '--schedule=TZ=UTC 0 * * * *']);
  assert.notEqual(tz.code, 0);
  assert.match(tz.stderr, /spec\.schedule: Invalid value: "TZ=UTC 0 \* \* \* \*": cannot use TZ or CRON_TZ in schedule, use timeZone field instead/);
  const short = await run(['create', 'cronjob', 'short', '--image=cron-ok', '--schedule=* * *']);
  assert.notEqual(short.code, 0);
  assert.match(short.stderr, /spec\.schedule: Invalid value: "\* \* \*": expected exactly 5 fields, found 3: \[\* \* \*\]/);
  const manifest = (name: string, extra: string) => `apiVersion: batch/v1
kind: CronJob
metadata:
  name: ${name}
spec:
  schedule: "@every 3s"
${extra}  jobTemplate:
    metadata:
      labels:
        app: ${name}
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
          - name: step
            image: cron-ok
`;
  const mars = await run(['apply', '-f', '-'], manifest('mars', '  timeZone: Mars/Olympus\n'));
  assert.notEqual(mars.code, 0);
  assert.match(mars.stderr, /spec\.timeZone: Invalid value: "Mars\/Olympus": unknown time zone Mars\/Olympus/);

  // A due schedule: a Job named after the schedule time, controlled by the CronJob.
  await kubectl(['apply', '-f', '-'], manifest('every', '  concurrencyPolicy: Forbid\n  successfulJobsHistoryLimit: 1\n  timeZone: Europe/Paris\n'));
  const every = await getCronJob('every');
  const first = await c.until('the first Job of cronjob every', async () => (await ownedJobs(every))[0], 20_000);
  const scheduled = first.metadata?.annotations?.['batch.kubernetes.io/cronjob-scheduled-timestamp'];
  assert.match(scheduled ?? '', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0[12]:00$/, 'RFC 3339 in Europe/Paris');
  assert.equal(first.metadata?.name, `every-${Math.floor(Date.parse(scheduled!) / 60_000)}`);
  assert.equal(first.metadata?.labels?.app, 'every');
  const ref = first.metadata?.ownerReferences?.[0];
  assert.deepEqual([ref?.kind, ref?.name, ref?.controller, ref?.blockOwnerDeletion], ['CronJob', 'every', true, true]);
  await kubectl(['wait', '--for=condition=complete', `job/${first.metadata?.name}`, '--timeout=30s']);
  const done = await c.until('lastSuccessfulTime of cronjob every', async () => {
    const cj = await getCronJob('every');
    return cj.status?.lastSuccessfulTime ? cj : undefined;
  });
  assert.ok(done.status?.lastScheduleTime, JSON.stringify(done.status));
  const seen = await c.until('SawCompletedJob of cronjob every', async () => {
    const evs = await events('every');
    return evs.some((e) => e.reason === 'SawCompletedJob') ? evs : undefined;
  });
  assert.ok(seen.some((e) => e.reason === 'SuccessfulCreate' && e.message === `Created job ${first.metadata?.name}` && e.source?.component === 'cronjob-controller'));
  assert.ok(seen.some((e) => e.message === `Saw completed job: ${first.metadata?.name}, condition: Complete`));
  assert.match(await kubectl(['get', 'cronjobs', 'every']), /^every\s+@every 3s\s+Europe\/Paris\s+False\s+[01]\s+\d+s\s+\d+s$/m);
  const described = await kubectl(['describe', 'cronjob', 'every']);
  assert.match(described, /^Schedule:\s+@every 3s$/m);
  assert.match(described, /^Concurrency Policy:\s+Forbid$/m);
  assert.match(described, new RegExp(`Normal\\s+SuccessfulCreate\\s+.*cronjob-controller\\s+Created job ${first.metadata?.name}`));

  // kubectl create job --from: a manual Job the CronJob owns; with successfulJobsHistoryLimit 1 only the
  // newest finished Job stays.
  await kubectl(['patch', 'cronjob', 'every', '--type=merge', '-p', '{"spec":{"suspend":true}}']);
  await kubectl(['create', 'job', 'manual', '--from=cronjob/every']);
  const manual = JSON.parse(await kubectl(['get', 'job', 'manual', '-o', 'json'])) as V1Job;
  assert.equal(manual.metadata?.annotations?.['cronjob.kubernetes.io/instantiate'], 'manual');
  assert.equal(manual.metadata?.ownerReferences?.[0]?.uid, every.metadata?.uid);
  await kubectl(['wait', '--for=condition=complete', 'job/manual', '--timeout=30s']);
  const left = await c.until('history limit 1 to leave one finished Job', async () => {
    const jobs = await ownedJobs(every);
    return jobs.length === 1 ? jobs : undefined;
  });
  assert.equal(left[0]?.metadata?.name, 'manual', 'the newest finished Job stays');
  // The event follows the delete (it is recorded once the DELETE has answered): wait for it.
  await c.until(`the SuccessfulDelete event of ${first.metadata?.name}`, async () => {
    const deleted = (await events('every')).filter((e) => e.reason === 'SuccessfulDelete').map((e) => e.message);
    return deleted.includes(`Deleted job ${first.metadata?.name}`);
  });

  // Deleting the CronJob deletes its Jobs (garbage collector).
  await kubectl(['delete', 'cronjob', 'every']);
  await c.until('the Jobs of the deleted cronjob to go', async () => (await ownedJobs(every)).length === 0);
});
