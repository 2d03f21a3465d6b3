/**
 * A CronJob's `timeZone` must be spelled as the IANA database spells it: kube-apiserver's
 * `time.LoadLocation` reads the zoneinfo file of that exact name, so `utc` or `europe/paris` are
 * `unknown time zone`, while Intl (which the validation asked) takes any case. Found by a user:
 * `timeZone: utc` was accepted by Kube32 and would be refused by a real cluster.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { validateCronJob } from '../../src/apiserver/registry/batch/cronjobs.ts';
import type { KubeObject } from '../../src/apiserver/storage/index.ts';

const cronJob = (timeZone: string): KubeObject => ({
  metadata: { name: 'tz' },
  spec: {
    schedule: '0 9 * * *',
    timeZone,
    concurrencyPolicy: 'Allow',
    jobTemplate: { spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'step' }] } } } },
  },
});
const problems = (tz: string) => validateCronJob(cronJob(tz)).map((c) => `${c.field}: ${c.message}`);

test('a time zone in another case than the IANA name is unknown; IANA names and their aliases are taken', () => {
  for (const tz of ['utc', 'europe/paris', 'EUROPE/PARIS', 'us/eastern', 'Europe/paris']) {
    assert.deepEqual(problems(tz), [`spec.timeZone: Invalid value: "${tz}": unknown time zone ${tz}`], tz);
  }
  for (const tz of ['UTC', 'Etc/UTC', 'Europe/Paris', 'America/Argentina/Buenos_Aires', 'US/Eastern', 'Asia/Kolkata', 'Europe/Kyiv']) {
    assert.deepEqual(problems(tz), [], tz);
  }
});
