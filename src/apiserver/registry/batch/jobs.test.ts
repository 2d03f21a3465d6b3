import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { KubeObject } from '../../storage/index.ts';
import { jobCompletionsText, jobs, jobStatusText, validateJob } from './index.ts';

function created(spec: Record<string, unknown>): KubeObject {
  const obj = { apiVersion: 'batch/v1', kind: 'Job', metadata: { name: 'pi', namespace: 'default', uid: 'u-1' }, spec } as unknown as KubeObject;
  jobs.prepareForCreate!(obj, { now: new Date(), list: async () => [] });
  return obj;
}

const template = (restartPolicy?: string) => ({ spec: { ...(restartPolicy ? { restartPolicy } : {}), containers: [{ name: 'pi', image: 'job-ok' }] } });

test('a Job is defaulted as Kubernetes does: counts, mode, generated selector and template labels', () => {
  const o = created({ template: template('Never') });
  const spec = o.spec as { [k: string]: unknown; template: { metadata: { labels: unknown } } };
  assert.equal(spec.completions, 1);
  assert.equal(spec.parallelism, 1);
  assert.equal(spec.backoffLimit, 6);
  assert.equal(spec.completionMode, 'NonIndexed');
  assert.equal(spec.suspend, false);
  assert.deepEqual(spec.selector, { matchLabels: { 'batch.kubernetes.io/controller-uid': 'u-1' } });
  assert.deepEqual(spec.template.metadata.labels, {
    'controller-uid': 'u-1',
    'batch.kubernetes.io/controller-uid': 'u-1',
    'job-name': 'pi',
    'batch.kubernetes.io/job-name': 'pi',
  });
  assert.deepEqual(validateJob(o), []);
  // Only parallelism: a work queue, no completions.
  const queue = created({ parallelism: 3, template: template('OnFailure') });
  assert.equal((queue.spec as Record<string, unknown>).completions, undefined);
  assert.equal(jobCompletionsText(queue), '0/1 of 3');
});

test('a Job is refused with Kubernetes words: restartPolicy, negative counts, Indexed mode, changed template', () => {
  const always = validateJob(created({ template: template() }));
  assert.deepEqual(always, [
    { reason: 'FieldValueNotSupported', message: 'Unsupported value: "Always": supported values: "OnFailure", "Never"', field: 'spec.template.spec.restartPolicy' },
  ]);
  const negative = validateJob(created({ backoffLimit: -1, template: template('Never') }));
  assert.deepEqual(negative.map((c) => [c.field, c.message]), [['spec.backoffLimit', 'Invalid value: -1: must be greater than or equal to 0']]);
  const indexed = validateJob(created({ completionMode: 'Indexed', template: template('Never') }));
  assert.deepEqual(indexed.map((c) => c.field), ['spec.completionMode']);
  const old = created({ template: template('Never') });
  const next = structuredClone(old);
  (next.spec as { template: { spec: { containers: { image: string }[] } } }).template.spec.containers[0]!.image = 'other';
  assert.deepEqual(validateJob(next, old).map((c) => [c.field, c.message]), [['spec.template', 'Invalid value: field is immutable']]);
});

test("kubectl's STATUS and COMPLETIONS cells", () => {
  const o = created({ completions: 2, template: template('Never') });
  assert.equal(jobStatusText(o), 'Running');
  o.status = { succeeded: 2, conditions: [{ type: 'SuccessCriteriaMet', status: 'True' }, { type: 'Complete', status: 'True' }] };
  assert.equal(jobStatusText(o), 'Complete');
  assert.equal(jobCompletionsText(o), '2/2');
  o.status = { conditions: [{ type: 'Suspended', status: 'True' }] };
  assert.equal(jobStatusText(o), 'Suspended');
  o.status = { failed: 7, conditions: [{ type: 'Failed', status: 'True' }] };
  assert.equal(jobStatusText(o), 'Failed');
});
