/**
 * `kubectl explain` against the API server's OpenAPI v3: every field has kube-apiserver's own
 * description, a field whose type is a model, IntOrString or Quantity too (client-node's models
 * lose those; openapi-field-docs.ts has them), printed before its type's description as kubectl
 * prints it against a real cluster.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KUBE32_NOTES } from '../../src/apiserver/handlers/openapi-notes.ts';
import { startApiServer } from '../helpers/apiserver.ts';

/** A value of each Job field Kube32 refuses, as a user would write it. */
const REFUSED_VALUES: Record<string, unknown> = {
  completionMode: 'Indexed',
  podFailurePolicy: { rules: [{ action: 'FailJob', onExitCodes: { operator: 'In', values: [42] } }] },
  successPolicy: { rules: [{ succeededCount: 1 }] },
  backoffLimitPerIndex: 1,
  maxFailedIndexes: 1,
  managedBy: 'example.com/other-controller',
};

const job = (name: string, extra: Record<string, unknown>): string =>
  JSON.stringify({
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name },
    spec: { completions: 1, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'hello' }] } }, ...extra },
  });

test('kubectl explain describes every field', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);

  await t.test('a field of a model type: its own description, then its type’s', async () => {
    let r = await api.kubectl(['explain', 'pod.spec.containers.resources']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /FIELD: resources <ResourceRequirements>\n+DESCRIPTION:\n\s+Compute Resources required by this container\. Cannot be updated\.[\s\S]*\n\s+ResourceRequirements describes the compute resource requirements\./);
    r = await api.kubectl(['explain', 'deployment.spec.strategy']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /DESCRIPTION:\n\s+The deployment strategy to use to replace existing pods with new ones\.\n\s+DeploymentStrategy describes/);
    r = await api.kubectl(['explain', 'pod.status.containerStatuses.state']);
    assert.match(r.stdout, /DESCRIPTION:\n\s+State holds details about the container's current condition\./);
    r = await api.kubectl(['explain', 'pod.spec']);
    assert.match(r.stdout, /affinity\s+<Affinity>\n\s+If specified, the pod's scheduling constraints/);
    assert.doesNotMatch(r.stdout, /<no description>/);
  });

  await t.test('an IntOrString field: its own description, not only IntOrString’s', async () => {
    const r = await api.kubectl(['explain', 'deploy.spec.strategy.rollingUpdate.maxSurge']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /FIELD: maxSurge <IntOrString>\n+DESCRIPTION:\n\s+The maximum number of pods that can be scheduled above the desired number of\s+pods\.[\s\S]*\n\s+IntOrString is a type that can hold an int32 or a string\./);
  });

  await t.test('a Quantity and a Time field keep theirs', async () => {
    let r = await api.kubectl(['explain', 'pod.spec.overhead']);
    assert.match(r.stdout, /DESCRIPTION:\n\s+Overhead represents the resource overhead associated with running a pod/);
    r = await api.kubectl(['explain', 'pod.metadata.creationTimestamp']);
    assert.match(r.stdout, /DESCRIPTION:\n\s+CreationTimestamp is a timestamp representing the server time/);
  });

  await t.test('job.spec says which fields Kube32 refuses, and the API server refuses each', async () => {
    const r = await api.kubectl(['explain', 'job.spec']);
    assert.equal(r.code, 0, r.stderr);
    const jobSpecNotes = Object.keys(KUBE32_NOTES).filter((k) => k.startsWith('io.k8s.api.batch.v1.JobSpec#'));
    assert.deepEqual(jobSpecNotes.map((k) => k.split('#')[1]).sort(), Object.keys(REFUSED_VALUES).sort());
    for (const field of Object.keys(REFUSED_VALUES)) {
      const text = field === 'completionMode' ? 'Kube32 runs NonIndexed Jobs only' : 'Not supported by Kube32';
      assert.match(r.stdout, new RegExp(`\\n  ${field}\\t<[^>]+>\\n\\s+${text}`), field);
      const created = await api.kubectl(['create', '-f', '-'], { input: job(`refused-${field.toLowerCase()}`, { [field]: REFUSED_VALUES[field] }) });
      assert.equal(created.code, 1, `${field}: ${created.stdout}`);
      assert.match(created.stderr, new RegExp(`is invalid: spec\\.${field}: Invalid value: .*not supported by Kube32`), field);
    }
    const explained = await api.kubectl(['explain', 'job.spec.podFailurePolicy']);
    assert.match(explained.stdout, /DESCRIPTION:\n\s+Not supported by Kube32: a Job \(or a CronJob's jobTemplate\) that sets it is\s+refused \(422 Invalid\)\. Every failed pod counts towards backoffLimit\.\n\s*\n\s+Specifies the policy of handling failed pods\./);
    // A Job without them is served.
    const ok = await api.kubectl(['create', '-f', '-'], { input: job('served', {}) });
    assert.equal(ok.code, 0, ok.stderr);
  });

  await t.test('a CronJob\'s jobTemplate says the same, and is refused the same', async () => {
    const r = await api.kubectl(['explain', 'cronjob.spec.jobTemplate.spec.podFailurePolicy']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /DESCRIPTION:\n\s+Not supported by Kube32: a Job \(or a CronJob's jobTemplate\) that sets it is/);
    const { spec } = JSON.parse(job('x', { podFailurePolicy: REFUSED_VALUES.podFailurePolicy })) as { spec: unknown };
    const cronJob = { apiVersion: 'batch/v1', kind: 'CronJob', metadata: { name: 'refused' }, spec: { schedule: '*/5 * * * *', jobTemplate: { spec } } };
    const created = await api.kubectl(['create', '-f', '-'], { input: JSON.stringify(cronJob) });
    assert.equal(created.code, 1, created.stdout);
    assert.match(created.stderr, /is invalid: spec\.jobTemplate\.spec\.podFailurePolicy: Invalid value: .*not supported by Kube32/);
  });

  await t.test('no field of any served document is left without a description', async () => {
    const index = JSON.parse((await api.kubectl(['get', '--raw', '/openapi/v3'])).stdout) as { paths: Record<string, { serverRelativeURL: string }> };
    const undescribed: string[] = [];
    for (const { serverRelativeURL } of Object.values(index.paths)) {
      const r = await api.kubectl(['get', '--raw', serverRelativeURL]);
      assert.equal(r.code, 0, r.stderr);
      const doc = JSON.parse(r.stdout) as { components: { schemas: Record<string, { properties?: Record<string, { description?: string }> }> } };
      for (const [name, s] of Object.entries(doc.components.schemas))
        for (const [field, p] of Object.entries(s.properties ?? {})) if (!p.description) undescribed.push(`${name}#${field}`);
    }
    assert.deepEqual(undescribed, []);
  });
});
