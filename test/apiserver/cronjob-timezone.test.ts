/**
 * A CronJob's `timeZone` must be spelled as the IANA database spells it: kube-apiserver's
 * `time.LoadLocation` reads the zoneinfo file of that exact name, so `utc` or `europe/paris` are
 * `unknown time zone`, while Intl (which the validation asked) takes any case. Found by a user:
 * `timeZone: utc` was accepted by Kube32 and would be refused by a real cluster. `kubectl explain
 * cronjob.spec.timeZone` says both (and that no zone is UTC, not the controllers' zone as Kubernetes says).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { validateCronJob } from '../../src/apiserver/registry/batch/cronjobs.ts';
import type { KubeObject } from '../../src/apiserver/storage/index.ts';
import { startApiServer } from '../helpers/apiserver.ts';

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

test('kubectl explain cronjob.spec.timeZone says that without one the schedule is read in UTC, and how names are spelled', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t);
  const r = await api.kubectl(['explain', 'cronjob.spec.timeZone']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /DESCRIPTION:\n\s+Without one, Kube32 reads the schedule in UTC \(the controllers' zone is not\s+used\)\. The name must be spelled as the IANA database spells it/, r.stdout);
  assert.match(r.stdout, /The time zone name for the given schedule/, "Kubernetes' description follows");
});
