/**
 * batch/v1 spec values of the wrong type are refused as kube-apiserver's JSON decoder refuses them: 400
 * BadRequest, `CronJob in version "v1" cannot be handled as a CronJob: json: cannot unmarshal string into
 * Go struct field CronJobSpec.spec.suspend of type bool`, on create, merge and JSON patches, whatever the
 * field validation. Found by a user: `kubectl patch cronjob x -p '{"spec":{"suspend":"true"}}'` was
 * stored, `kubectl get cronjobs` showed SUSPEND `<unset>` and the CronJob went on starting Jobs.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startApiServer } from '../helpers/apiserver.ts';

const template = { spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'step' }] } } } };
const cronJob = (name: string, spec: Record<string, unknown> = {}) =>
  JSON.stringify({ apiVersion: 'batch/v1', kind: 'CronJob', metadata: { name }, spec: { schedule: '*/5 * * * *', jobTemplate: template, ...spec } });

test('batch/v1 spec values of the wrong Go type are 400 BadRequest with Go decoder words; right ones are stored', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  const create = (body: string) => api.kubectl(['create', '-f', '-'], { input: body });

  let r = await create(cronJob('quoted', { suspend: 'true' }));
  assert.notEqual(r.code, 0, 'a CronJob with suspend "true" (a string) was created');
  assert.match(r.stderr, /Error from server \(BadRequest\).*CronJob in version "v1" cannot be handled as a CronJob: json: cannot unmarshal string into Go struct field CronJobSpec\.spec\.suspend of type bool/);
  r = await create(cronJob('big', { successfulJobsHistoryLimit: 3_000_000_000 }));
  assert.match(r.stderr, /cannot unmarshal number 3000000000 into Go struct field CronJobSpec\.spec\.successfulJobsHistoryLimit of type int32/);
  r = await create(cronJob('numeric', { schedule: 5 }));
  assert.match(r.stderr, /cannot unmarshal number into Go struct field CronJobSpec\.spec\.schedule of type string/);
  r = await create(cronJob('nested', { jobTemplate: { spec: { ...template.spec, backoffLimit: '6' } } }));
  assert.match(r.stderr, /cannot unmarshal string into Go struct field JobSpec\.spec\.jobTemplate\.spec\.backoffLimit of type int32/);
  r = await create(JSON.stringify({ apiVersion: 'batch/v1', kind: 'Job', metadata: { name: 'half' }, spec: { ...template.spec, parallelism: 1.5 } }));
  assert.match(r.stderr, /Job in version "v1" cannot be handled as a Job: json: cannot unmarshal number 1\.5 into Go struct field JobSpec\.spec\.parallelism of type int32/);

  r = await create(cronJob('right', { suspend: false, successfulJobsHistoryLimit: 2, startingDeadlineSeconds: 300 }));
  assert.equal(r.code, 0, r.stderr);
  for (const type of ['merge', 'strategic']) {
    r = await api.kubectl(['patch', 'cronjob', 'right', `--type=${type}`, '-p', '{"spec":{"suspend":"true"}}']);
    assert.match(r.stderr, /BadRequest.*cannot unmarshal string into Go struct field CronJobSpec\.spec\.suspend of type bool/, `${type} patch: ${r.stderr}`);
  }
  r = await api.kubectl(['patch', 'cronjob', 'right', '--type=json', '-p', '[{"op":"replace","path":"/spec/suspend","value":"yes"}]']);
  assert.match(r.stderr, /BadRequest.*cannot unmarshal string into Go struct field CronJobSpec\.spec\.suspend of type bool/);
  r = await api.kubectl(['patch', 'cronjob', 'right', '-p', '{"spec":{"suspend":true,"startingDeadlineSeconds":null}}']);
  assert.equal(r.code, 0, r.stderr);
  r = await api.kubectl(['get', 'cronjob', 'right', '-o', 'jsonpath={.spec.suspend} {.spec.startingDeadlineSeconds}']);
  assert.equal(r.stdout, 'true ');
});
