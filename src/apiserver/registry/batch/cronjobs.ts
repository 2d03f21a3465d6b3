/**
 * `batch/v1` CronJobs (with the status subresource): Kubernetes 1.32's cronjob strategy
 * (pkg/registry/batch/cronjob) and validation (pkg/apis/batch/validation):
 *
 * - defaults (`SetDefaults_CronJob`): `concurrencyPolicy` Allow, `suspend` false, `successfulJobsHistoryLimit`
 *   3, `failedJobsHistoryLimit` 1; the pod template inside `jobTemplate` gets the pod defaults (the Job spec
 *   itself none: the Job made from it is defaulted when it is created);
 * - validation with Kubernetes' messages: a name of at most 52 characters (the controller appends `-<11
 *   digits>`), `schedule` required and parsing as robfig's standard cron (`src/lib/cron-schedule.ts`), no
 *   `TZ=`/`CRON_TZ=` in a new schedule (kept on an update of one that had it), `timeZone` an IANA zone and not
 *   `Local`, `concurrencyPolicy` Allow/Forbid/Replace, non-negative `startingDeadlineSeconds` and history
 *   limits, and `jobTemplate` as a Job's (its spec, its and its pod template's labels and annotations, the
 *   256 KiB bound; no `selector`, no `manualSelector: true`);
 * - the Table columns kubectl 1.32 prints: NAME, SCHEDULE, TIMEZONE, SUSPEND, ACTIVE, LAST SCHEDULE, AGE
 *   (`-o wide`: CONTAINERS, IMAGES, SELECTOR).
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { CronScheduleError, isTimeZone, parseCronSchedule } from '../../../lib/index.ts';
import type { StatusCause } from '../../errors.ts';
import type { KubeObject } from '../../storage/index.ts';
import { defaultPodSpec } from '../pods/index.ts';
import type { ResourceDef } from '../types.ts';
import { AGE_COLUMN, NAME_COLUMN, age, arr, invalidValue, rec, required, selectorString, validateMetaMaps, validateSubdomain } from '../util.ts';
import { validateJobSpec } from './index.ts';

/** The defaults of a CronJob's spec (Kubernetes' `SetDefaults_CronJob`). */
export const CRONJOB_DEFAULTS = {
  concurrencyPolicy: 'Allow',
  suspend: false,
  successfulJobsHistoryLimit: 3,
  failedJobsHistoryLimit: 1,
} as const;

/** The concurrency policies Kubernetes knows. */
export const CONCURRENCY_POLICIES = ['Allow', 'Forbid', 'Replace'] as const;

/** The longest CronJob name: a Job name is a DNS-1035 label (63) and the controller appends 11 characters. */
export const MAX_CRONJOB_NAME_LENGTH = 52;

/** Defaults of a CronJob, in place. */
function defaultCronJob(obj: KubeObject): void {
  if (obj.spec === undefined) return;
  const spec = rec(obj.spec);
  for (const [k, v] of Object.entries(CRONJOB_DEFAULTS)) spec[k] ??= v;
  const jobTemplate = rec(spec.jobTemplate);
  spec.jobTemplate = jobTemplate;
  const jobSpec = rec(jobTemplate.spec);
  jobTemplate.spec = jobSpec;
  const tpl = rec(jobSpec.template);
  jobSpec.template = tpl;
  const podSpec = rec(tpl.spec);
  tpl.spec = podSpec;
  for (const list of ['containers', 'initContainers']) {
    for (const c of arr(podSpec[list])) for (const p of arr(c.ports)) if (p.hostPort === 0) delete p.hostPort;
  }
  defaultPodSpec(podSpec);
}

/** Problems of `metadata`'s maps found at `meta`, named under `prefix` (`spec.jobTemplate.`). */
function metaMapsAt(meta: unknown, prefix: string): StatusCause[] {
  return validateMetaMaps({ metadata: rec(meta) } as KubeObject).map((c) => ({ ...c, field: c.field ? `${prefix}${c.field}` : c.field }));
}

/** Problems of a schedule (Kubernetes' `validateScheduleFormat`). */
function validateSchedule(schedule: string, timeZone: unknown, allowTZ: boolean): StatusCause[] {
  const out: StatusCause[] = [];
  try {
    parseCronSchedule(schedule);
  } catch (err: unknown) {
    out.push(invalidValue('spec.schedule', schedule, err instanceof CronScheduleError ? err.message : String(err)));
  }
  if (schedule.includes('TZ')) {
    if (!allowTZ) out.push(invalidValue('spec.schedule', schedule, 'cannot use TZ or CRON_TZ in schedule, use timeZone field instead'));
    else if (typeof timeZone === 'string') out.push(invalidValue('spec.schedule', schedule, 'cannot use both timeZone field and TZ or CRON_TZ in schedule'));
  }
  return out;
}

/** Go's `validTimeZoneCharacters`, for each `/`-separated part of a zone. */
const TZ_PART = /^[A-Za-z.\-_0-9+]{1,14}$/;

/** Problems of `spec.timeZone` (Kubernetes' `validateTimeZone`). */
function validateTimeZone(tz: unknown): StatusCause[] {
  if (tz === undefined || tz === null) return [];
  if (typeof tz !== 'string' || tz === '') return [invalidValue('spec.timeZone', tz, 'timeZone must be nil or non-empty string')];
  for (const part of tz.split('/')) {
    if (part === '.' || part === '..' || part.startsWith('-') || !TZ_PART.test(part)) return [invalidValue('spec.timeZone', tz, `unknown time zone ${tz}`)];
  }
  if (tz.toLowerCase() === 'local') return [invalidValue('spec.timeZone', tz, 'timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones')];
  if (!isTimeZone(tz) || !isExactZoneName(tz)) return [invalidValue('spec.timeZone', tz, `unknown time zone ${tz}`)];
  return [];
}

/** Where Go's `time.LoadLocation` looks first on Linux. */
const ZONEINFO_DIR = '/usr/share/zoneinfo';
const CANONICAL_ZONES = new Set(Intl.supportedValuesOf('timeZone'));

/**
 * Whether `tz`, a zone Intl knows, is spelled as the IANA database spells it. Intl takes zone names in
 * any case (`utc`, `europe/paris`); kube-apiserver's `time.LoadLocation` reads the zoneinfo file of that
 * exact name (then its embedded copy, as case-sensitive), so it refuses them. Accepted: `UTC`, a name
 * Intl lists (canonical), one with a zoneinfo file of that exact name (aliases such as `US/Eastern`),
 * and, on a host without zoneinfo files, any alias that is not a canonical name in another case.
 */
function isExactZoneName(tz: string): boolean {
  if (tz === 'UTC' || CANONICAL_ZONES.has(tz)) return true;
  if (existsSync(ZONEINFO_DIR)) {
    try {
      return statSync(join(ZONEINFO_DIR, tz)).isFile();
    } catch {
      return false;
    }
  }
  const canonical = new Intl.DateTimeFormat('en-US', { timeZone: tz }).resolvedOptions().timeZone;
  return canonical.toLowerCase() !== tz.toLowerCase();
}

const isCount = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v >= 0;

/**
 * Problems of a CronJob (Kubernetes' `ValidateCronJobCreate` / `ValidateCronJobUpdate`); pure.
 * @param old the stored CronJob on update (a `TZ=` schedule it had may be kept; its name is not re-checked for length)
 */
export function validateCronJob(obj: KubeObject, old?: KubeObject): StatusCause[] {
  const out = [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj)];
  if (!old && (obj.metadata.name?.length ?? 0) > MAX_CRONJOB_NAME_LENGTH) {
    out.push(invalidValue('metadata.name', obj.metadata.name, `must be no more than ${MAX_CRONJOB_NAME_LENGTH} characters`));
  }
  if (obj.spec === undefined) return [...out, required('spec')];
  const spec = rec(obj.spec);
  const was = old ? rec(old.spec) : undefined;
  if (typeof spec.schedule !== 'string' || spec.schedule === '') out.push(required('spec.schedule'));
  else out.push(...validateSchedule(spec.schedule, spec.timeZone, typeof was?.schedule === 'string' && was.schedule.includes('TZ')));
  if (spec.startingDeadlineSeconds !== undefined && spec.startingDeadlineSeconds !== null && !isCount(spec.startingDeadlineSeconds)) {
    out.push(invalidValue('spec.startingDeadlineSeconds', spec.startingDeadlineSeconds, 'must be greater than or equal to 0'));
  }
  if (!was || was.timeZone !== spec.timeZone) out.push(...validateTimeZone(spec.timeZone));
  const policy = spec.concurrencyPolicy;
  if (policy === undefined || policy === '') out.push(required('spec.concurrencyPolicy'));
  else if (!CONCURRENCY_POLICIES.includes(policy as never)) {
    out.push({
      reason: 'FieldValueNotSupported',
      message: `Unsupported value: ${JSON.stringify(policy)}: supported values: ${CONCURRENCY_POLICIES.map((p) => `"${p}"`).join(', ')}`,
      field: 'spec.concurrencyPolicy',
    });
  }
  for (const f of ['successfulJobsHistoryLimit', 'failedJobsHistoryLimit'] as const) {
    if (spec[f] !== undefined && spec[f] !== null && !isCount(spec[f])) out.push(invalidValue(`spec.${f}`, spec[f], 'must be greater than or equal to 0'));
  }
  const jobTemplate = rec(spec.jobTemplate);
  const jobSpec = rec(jobTemplate.spec);
  out.push(...metaMapsAt(jobTemplate.metadata, 'spec.jobTemplate.'));
  out.push(...metaMapsAt(rec(jobSpec.template).metadata, 'spec.jobTemplate.spec.template.'));
  out.push(...validateJobSpec(jobSpec, 'spec.jobTemplate.spec', true));
  if (jobSpec.selector !== undefined && jobSpec.selector !== null) {
    out.push(invalidValue('spec.jobTemplate.spec.selector', jobSpec.selector, '`selector` will be auto-generated'));
  }
  if (jobSpec.manualSelector === true) {
    out.push({ reason: 'FieldValueNotSupported', message: 'Unsupported value: true: supported values: "nil", "false"', field: 'spec.jobTemplate.spec.manualSelector' });
  }
  return out;
}

/** kubectl's SUSPEND cell (its `printBoolPtr`). */
function boolText(v: unknown): string {
  return v === true ? 'True' : v === false ? 'False' : '<unset>';
}

/** cronjobs (batch/v1) */
export const cronjobs: ResourceDef = {
  group: 'batch',
  version: 'v1',
  kind: 'CronJob',
  listKind: 'CronJobList',
  plural: 'cronjobs',
  singular: 'cronjob',
  namespaced: true,
  shortNames: ['cj'],
  categories: ['all'],
  subresources: ['status'],
  hasStatus: true,
  fields: ['spec', 'status'],
  prepareForCreate(obj) {
    defaultCronJob(obj);
  },
  prepareForUpdate(obj) {
    defaultCronJob(obj);
  },
  validate: validateCronJob,
  columns: [
    NAME_COLUMN,
    { name: 'Schedule', type: 'string', description: 'The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.' },
    { name: 'Timezone', type: 'string', description: 'The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.' },
    { name: 'Suspend', type: 'boolean', description: 'This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.' },
    { name: 'Active', type: 'integer', description: 'A list of pointers to currently running jobs.' },
    { name: 'Last Schedule', type: 'string', description: 'Information when was the last time the job was successfully scheduled.' },
    AGE_COLUMN,
    { name: 'Containers', type: 'string', priority: 1, description: 'Names of each container in the template.' },
    { name: 'Images', type: 'string', priority: 1, description: 'Images referenced by each container in the template.' },
    { name: 'Selector', type: 'string', priority: 1, description: 'A label query over pods that should match the pod count.' },
  ],
  cells(o, now) {
    const spec = rec(o.spec);
    const status = rec(o.status);
    const jobSpec = rec(rec(spec.jobTemplate).spec);
    const cs = arr(rec(rec(jobSpec.template).spec).containers);
    const selector = jobSpec.selector === undefined || jobSpec.selector === null ? '<none>' : selectorString(jobSpec.selector) || '<none>';
    return [
      o.metadata.name,
      spec.schedule,
      typeof spec.timeZone === 'string' ? spec.timeZone : '<none>',
      boolText(spec.suspend),
      arr(status.active).length,
      typeof status.lastScheduleTime === 'string' ? age(status.lastScheduleTime, now) : '<none>',
      age(o.metadata.creationTimestamp, now),
      cs.map((c) => c.name).join(','),
      cs.map((c) => c.image).join(','),
      selector,
    ];
  },
};
