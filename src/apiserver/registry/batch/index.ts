/**
 * `batch/v1` Jobs (with the status subresource): Kubernetes' job strategy (pkg/registry/batch/job) as far as
 * Kube32 runs Jobs: defaults (`completions`/`parallelism` 1, `backoffLimit` 6, `completionMode` NonIndexed,
 * `suspend` false, `podReplacementPolicy` TerminatingOrFailed), the generated selector and template labels
 * (`batch.kubernetes.io/controller-uid`, `batch.kubernetes.io/job-name`, and the legacy `controller-uid`,
 * `job-name`) unless `manualSelector` is true, validation (restartPolicy Never or OnFailure, non-negative
 * counts, an immutable template, selector and completions) and the Table columns kubectl prints
 * (NAME, STATUS, COMPLETIONS, DURATION, AGE; `-o wide`: CONTAINERS, IMAGES, SELECTOR).
 *
 * Not served: `completionMode: Indexed`, `podFailurePolicy`, `successPolicy`, `managedBy` (refused with
 * a clear Invalid cause rather than ignored).
 */
import { isDeepStrictEqual } from 'node:util';
import { humanDuration } from '../../../lib/index.ts';
import type { StatusCause } from '../../errors.ts';
import type { KubeObject } from '../../storage/index.ts';
import { defaultPodSpec } from '../pods/index.ts';
import { labelSelectorFromObject } from '../selectors.ts';
import type { ResourceDef } from '../types.ts';
import { AGE_COLUMN, NAME_COLUMN, age, arr, immutable, invalidValue, rec, required, selectorString, validateMetaMaps, validateSubdomain, validateTemplateMetaMaps } from '../util.ts';

/** The labels Kubernetes puts on a Job's template (and so its pods), and selects them by. */
export const JOB_LABELS = {
  controllerUid: 'batch.kubernetes.io/controller-uid',
  jobName: 'batch.kubernetes.io/job-name',
  legacyControllerUid: 'controller-uid',
  legacyJobName: 'job-name',
} as const;

/** Kubernetes' `BackoffLimit` default. */
export const DEFAULT_BACKOFF_LIMIT = 6;

/** Defaults of a Job's spec, in place (Kubernetes' `SetDefaults_Job`); `name`/`uid` label the template. */
function defaultJob(obj: KubeObject, create: boolean): void {
  if (obj.spec === undefined) return;
  const spec = rec(obj.spec);
  // Neither set: one pod to one completion. Only parallelism set: a work queue (no completions).
  if (spec.completions === null) delete spec.completions;
  if (spec.completions === undefined && (spec.parallelism === undefined || spec.parallelism === null)) spec.completions = 1;
  spec.parallelism ??= 1;
  spec.backoffLimit ??= DEFAULT_BACKOFF_LIMIT;
  spec.completionMode ??= 'NonIndexed';
  spec.suspend ??= false;
  if (spec.podFailurePolicy === undefined) spec.podReplacementPolicy ??= 'TerminatingOrFailed';
  const tpl = rec(spec.template);
  spec.template = tpl;
  const meta = rec(tpl.metadata);
  tpl.metadata = meta;
  if (meta.generation === 0) delete meta.generation;
  const podSpec = rec(tpl.spec);
  tpl.spec = podSpec;
  for (const list of ['containers', 'initContainers']) {
    for (const c of arr(podSpec[list])) for (const p of arr(c.ports)) if (p.hostPort === 0) delete p.hostPort;
  }
  defaultPodSpec(podSpec);
  if (create && spec.manualSelector !== true) {
    // Kubernetes' generateSelector: the template carries the uid and name; the selector, the uid.
    const uid = obj.metadata.uid ?? '';
    const labels = { ...(rec(meta.labels) as Record<string, string>) };
    labels[JOB_LABELS.legacyControllerUid] ??= uid;
    labels[JOB_LABELS.controllerUid] ??= uid;
    labels[JOB_LABELS.legacyJobName] ??= obj.metadata.name ?? '';
    labels[JOB_LABELS.jobName] ??= obj.metadata.name ?? '';
    meta.labels = labels;
    const sel = rec(spec.selector);
    const matchLabels = { ...(rec(sel.matchLabels) as Record<string, string>) };
    matchLabels[JOB_LABELS.controllerUid] ??= uid;
    spec.selector = { ...sel, matchLabels };
  }
}

const notSupported = (field: string, value: unknown, supported: string[]): StatusCause => ({
  reason: 'FieldValueNotSupported',
  message: `Unsupported value: ${JSON.stringify(value)}: supported values: ${supported.map((s) => `"${s}"`).join(', ')}`,
  field,
});

const isCount = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v >= 0;

/**
 * Problems of a Job's spec (Kubernetes' `validateJobSpec`, the parts Kube32 serves) under `path` (`spec` of a
 * Job, `spec.jobTemplate.spec` of a CronJob). The selector is checked by the caller. A `template` spec (a
 * CronJob's) has no defaults applied, so an unset `completionMode` is accepted there.
 */
export function validateJobSpec(spec: Record<string, unknown>, path: string, template: boolean): StatusCause[] {
  const out: StatusCause[] = [];
  for (const f of ['parallelism', 'completions', 'backoffLimit', 'activeDeadlineSeconds', 'ttlSecondsAfterFinished'] as const) {
    if (spec[f] !== undefined && !isCount(spec[f])) out.push(invalidValue(`${path}.${f}`, spec[f], 'must be greater than or equal to 0'));
  }
  if (spec.activeDeadlineSeconds === 0) out.push(invalidValue(`${path}.activeDeadlineSeconds`, 0, 'must be greater than 0'));
  if (spec.completionMode !== 'NonIndexed' && !(template && spec.completionMode === undefined)) {
    out.push(
      spec.completionMode === 'Indexed'
        ? invalidValue(`${path}.completionMode`, 'Indexed', 'Indexed completion mode is not supported by Kube32')
        : notSupported(`${path}.completionMode`, spec.completionMode, ['NonIndexed', 'Indexed']),
    );
  }
  for (const f of ['podFailurePolicy', 'successPolicy', 'managedBy', 'backoffLimitPerIndex', 'maxFailedIndexes'] as const) {
    if (spec[f] !== undefined && spec[f] !== null) out.push(invalidValue(`${path}.${f}`, spec[f], `${f} is not supported by Kube32`));
  }
  const tpl = rec(spec.template);
  const podSpec = rec(tpl.spec);
  const policy = podSpec.restartPolicy;
  if (policy !== 'OnFailure' && policy !== 'Never') out.push(notSupported(`${path}.template.spec.restartPolicy`, policy, ['OnFailure', 'Never']));
  const containers = arr(podSpec.containers);
  if (containers.length === 0) out.push(required(`${path}.template.spec.containers`));
  containers.forEach((c, i) => {
    if (typeof c.image !== 'string' || !c.image) out.push(required(`${path}.template.spec.containers[${i}].image`));
    if (typeof c.name !== 'string' || !c.name) out.push(required(`${path}.template.spec.containers[${i}].name`));
  });
  return out;
}

/** Problems of a Job (Kubernetes' `ValidateJob` / `ValidateJobUpdate`, the parts Kube32 serves). */
export function validateJob(obj: KubeObject, old?: KubeObject): StatusCause[] {
  const out = [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj), ...validateTemplateMetaMaps(obj)];
  if (obj.spec === undefined) return [...out, required('spec')];
  const spec = rec(obj.spec);
  out.push(...validateJobSpec(spec, 'spec', false));
  const tpl = rec(spec.template);
  const sel = spec.selector;
  if (!sel || (Object.keys(rec(rec(sel).matchLabels)).length === 0 && arr(rec(sel).matchExpressions).length === 0)) {
    out.push(required('spec.selector'));
  } else {
    try {
      const labels = (rec(tpl.metadata).labels ?? {}) as Record<string, string>;
      if (!labelSelectorFromObject(sel)(labels)) out.push(invalidValue('spec.template.metadata.labels', labels, '`selector` does not match template `labels`'));
    } catch (err: unknown) {
      out.push(invalidValue('spec.selector', sel, err instanceof Error ? err.message : String(err)));
    }
    if (spec.manualSelector !== true) {
      const uid = old?.metadata.uid ?? obj.metadata.uid;
      if (rec(rec(sel).matchLabels)[JOB_LABELS.controllerUid] !== uid) out.push(invalidValue('spec.selector', sel, '`selector` not auto-generated'));
    }
  }
  if (old) {
    const was = rec(old.spec);
    if (!isDeepStrictEqual(was.selector, spec.selector)) out.push(immutable('spec.selector'));
    if (!isDeepStrictEqual(was.template, spec.template)) out.push(immutable('spec.template'));
    if (was.completions !== spec.completions) out.push(immutable('spec.completions'));
    if (was.completionMode !== spec.completionMode) out.push(immutable('spec.completionMode'));
  }
  return out;
}

const intOr = (v: unknown) => (typeof v === 'number' ? v : 0);

const hasCondition = (o: KubeObject, type: string) => arr(rec(o.status).conditions).some((c) => c.type === type && c.status === 'True');

/** kubectl's STATUS of a Job (its 1.32 printer). */
export function jobStatusText(o: KubeObject): string {
  if (hasCondition(o, 'Complete')) return 'Complete';
  if (hasCondition(o, 'Failed')) return 'Failed';
  if (o.metadata.deletionTimestamp) return 'Terminating';
  if (hasCondition(o, 'SuccessCriteriaMet')) return 'SuccessCriteriaMet';
  if (hasCondition(o, 'Suspended')) return 'Suspended';
  if (hasCondition(o, 'FailureTarget')) return 'FailureTarget';
  return 'Running';
}

/** kubectl's COMPLETIONS of a Job: `succeeded/completions`, or `succeeded/1 of parallelism` without completions. */
export function jobCompletionsText(o: KubeObject): string {
  const spec = rec(o.spec);
  const succeeded = intOr(rec(o.status).succeeded);
  if (typeof spec.completions === 'number') return `${succeeded}/${spec.completions}`;
  const parallelism = intOr(spec.parallelism);
  return parallelism > 1 ? `${succeeded}/1 of ${parallelism}` : `${succeeded}/1`;
}

function durationText(o: KubeObject, now: Date): string {
  const st = rec(o.status);
  const start = typeof st.startTime === 'string' ? Date.parse(st.startTime) : Number.NaN;
  if (Number.isNaN(start)) return '';
  const end = typeof st.completionTime === 'string' ? Date.parse(st.completionTime) : now.getTime();
  return humanDuration(Math.max(0, end - start));
}

/** jobs (batch/v1) */
export const jobs: ResourceDef = {
  group: 'batch',
  version: 'v1',
  kind: 'Job',
  listKind: 'JobList',
  plural: 'jobs',
  singular: 'job',
  namespaced: true,
  categories: ['all'],
  subresources: ['status'],
  hasStatus: true,
  fields: ['spec', 'status'],
  prepareForCreate(obj) {
    defaultJob(obj, true);
  },
  prepareForUpdate(obj) {
    defaultJob(obj, false);
  },
  validate: validateJob,
  fieldSelectors: { 'status.successful': (o) => String(intOr(rec(o.status).succeeded)) },
  columns: [
    NAME_COLUMN,
    { name: 'Status', type: 'string', description: 'Status of the job.' },
    { name: 'Completions', type: 'string', description: 'The number of successfully finished pods out of the desired completions.' },
    { name: 'Duration', type: 'string', description: 'Time required to complete the job.' },
    AGE_COLUMN,
    { name: 'Containers', type: 'string', priority: 1, description: 'Names of each container in the template.' },
    { name: 'Images', type: 'string', priority: 1, description: 'Images referenced by each container in the template.' },
    { name: 'Selector', type: 'string', priority: 1, description: 'Selector of the pods of the job.' },
  ],
  cells(o, now) {
    const spec = rec(o.spec);
    const cs = arr(rec(rec(spec.template).spec).containers);
    return [
      o.metadata.name,
      jobStatusText(o),
      jobCompletionsText(o),
      durationText(o, now),
      age(o.metadata.creationTimestamp, now),
      cs.map((c) => c.name).join(','),
      cs.map((c) => c.image).join(','),
      selectorString(spec.selector),
    ];
  },
};
