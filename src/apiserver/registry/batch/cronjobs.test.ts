import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { KubeObject } from '../../storage/index.ts';
import { cronjobs, validateCronJob } from './cronjobs.ts';

function created(spec: Record<string, unknown>, name = 'tick'): KubeObject {
  const obj = { apiVersion: 'batch/v1', kind: 'CronJob', metadata: { name, namespace: 'default', uid: 'u-1' }, spec } as unknown as KubeObject;
  cronjobs.prepareForCreate!(obj, { now: new Date(), list: async () => [] });
  return obj;
}

const jobTemplate = (restartPolicy = 'OnFailure', extra: Record<string, unknown> = {}) => ({
  metadata: { name: 'tick' },
  spec: { ...extra, template: { spec: { restartPolicy, containers: [{ name: 'tick', image: 'job-ok' }] } } },
});

const messages = (o: KubeObject, old?: KubeObject) => validateCronJob(o, old).map((c) => `${c.field}: ${c.message}`);

test('a CronJob is defaulted as Kubernetes 1.32 does; its Job spec is left for the Job', () => {
  const o = created({ schedule: '*/1 * * * *', jobTemplate: jobTemplate() });
  const spec = o.spec as Record<string, unknown> & { jobTemplate: { spec: Record<string, unknown> & { template: { spec: Record<string, unknown> } } } };
  assert.equal(spec.concurrencyPolicy, 'Allow');
  assert.equal(spec.suspend, false);
  assert.equal(spec.successfulJobsHistoryLimit, 3);
  assert.equal(spec.failedJobsHistoryLimit, 1);
  assert.equal(spec.jobTemplate.spec.backoffLimit, undefined);
  assert.equal(spec.jobTemplate.spec.template.spec.terminationGracePeriodSeconds, 30, 'pod defaults apply to the template');
  assert.deepEqual(validateCronJob(o), []);
});

test('a CronJob is refused with Kubernetes words: schedule, TZ, timeZone, policy, limits, name length, template', () => {
  assert.deepEqual(messages(created({ schedule: '* * *', jobTemplate: jobTemplate() })), ['spec.schedule: Invalid value: "* * *": expected exactly 5 fields, found 3: [* * *]']);
  assert.deepEqual(messages(created({ schedule: 'TZ=UTC 0 * * * *', jobTemplate: jobTemplate() })), [
    'spec.schedule: Invalid value: "TZ=UTC 0 * * * *": cannot use TZ or CRON_TZ in schedule, use timeZone field instead',
  ]);
  assert.deepEqual(messages(created({ schedule: '0 * * * *', timeZone: 'Mars/Olympus', jobTemplate: jobTemplate() })), [
    'spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus',
  ]);
  assert.deepEqual(messages(created({ schedule: '0 * * * *', timeZone: 'Local', jobTemplate: jobTemplate() })), [
    'spec.timeZone: Invalid value: "Local": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones',
  ]);
  assert.deepEqual(messages(created({ schedule: '0 * * * *', timeZone: 'Europe/Paris', jobTemplate: jobTemplate() })), []);
  assert.deepEqual(messages(created({ schedule: '0 * * * *', concurrencyPolicy: 'Sometimes', startingDeadlineSeconds: -1, successfulJobsHistoryLimit: -1, jobTemplate: jobTemplate() })), [
    'spec.startingDeadlineSeconds: Invalid value: -1: must be greater than or equal to 0',
    'spec.concurrencyPolicy: Unsupported value: "Sometimes": supported values: "Allow", "Forbid", "Replace"',
    'spec.successfulJobsHistoryLimit: Invalid value: -1: must be greater than or equal to 0',
  ]);
  assert.deepEqual(messages(created({ schedule: '0 * * * *', jobTemplate: jobTemplate() }, 'a'.repeat(53))), [
    `metadata.name: Invalid value: "${'a'.repeat(53)}": must be no more than 52 characters`,
  ]);
  assert.deepEqual(messages(created({ schedule: '0 * * * *', jobTemplate: jobTemplate('Always', { selector: { matchLabels: { a: 'b' } }, manualSelector: true }) })), [
    'spec.jobTemplate.spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"',
    'spec.jobTemplate.spec.selector: Invalid value: {"matchLabels":{"a":"b"}}: `selector` will be auto-generated',
    'spec.jobTemplate.spec.manualSelector: Unsupported value: true: supported values: "nil", "false"',
  ]);
  const big = jobTemplate();
  (big.metadata as Record<string, unknown>).annotations = { big: 'x'.repeat(256 * 1024) };
  assert.deepEqual(messages(created({ schedule: '0 * * * *', jobTemplate: big })), ['spec.jobTemplate.metadata.annotations: Too long: must have at most 262144 bytes']);
  assert.deepEqual(messages(created({ jobTemplate: jobTemplate() })), ['spec.schedule: Required value']);
});

test('an update may keep the TZ= schedule a CronJob already had, not add a timeZone beside it', () => {
  const old = { ...created({ schedule: 'TZ=UTC 0 * * * *', jobTemplate: jobTemplate() }), metadata: { name: 'tick', namespace: 'default', uid: 'u-1' } } as KubeObject;
  const same = structuredClone(old);
  assert.deepEqual(messages(same, old), []);
  const both = structuredClone(old);
  (both.spec as Record<string, unknown>).timeZone = 'UTC';
  assert.deepEqual(messages(both, old), ['spec.schedule: Invalid value: "TZ=UTC 0 * * * *": cannot use both timeZone field and TZ or CRON_TZ in schedule']);
});

test("kubectl's cells: schedule, timezone, suspend, active count, last schedule, age; wide: containers, images, selector", () => {
  const o = created({ schedule: '*/5 * * * *', jobTemplate: jobTemplate() });
  o.metadata.creationTimestamp = '2026-11-29T22:00:00Z';
  const now = new Date('2026-11-29T22:10:00Z');
  assert.deepEqual(cronjobs.cells(o, now), ['tick', '*/5 * * * *', '<none>', 'False', 0, '<none>', '10m', 'tick', 'job-ok', '<none>']);
  (o.spec as Record<string, unknown>).timeZone = 'Europe/Paris';
  o.status = { active: [{ name: 'tick-1' }], lastScheduleTime: '2026-11-29T22:09:30Z' };
  assert.deepEqual(cronjobs.cells(o, now).slice(0, 7), ['tick', '*/5 * * * *', 'Europe/Paris', 'False', 1, '30s', '10m']);
  assert.deepEqual(cronjobs.columns.map((c) => c.name), ['Name', 'Schedule', 'Timezone', 'Suspend', 'Active', 'Last Schedule', 'Age', 'Containers', 'Images', 'Selector']);
});
