/**
 * The CronJob sync (Kubernetes 1.32's `cronjob_controllerv2.go`, `syncCronJob` and `cleanupFinishedJobs`):
 *
 * 1. The Jobs the CronJob controls are compared with `status.active`: a finished one leaves it
 *    (`SawCompletedJob` "Saw completed job: NAME, condition: Complete"), a succeeded one moves
 *    `lastSuccessfulTime`, an unfinished one the status does not list (after a fresh read of the CronJob) is
 *    reported (`UnexpectedJob`: a Job made by `kubectl create job --from=cronjob/X`), and a listed one that
 *    no longer exists leaves it (`MissingJob`).
 * 2. Unless the CronJob is being deleted or is suspended, the latest schedule time due (in `spec.timeZone`,
 *    counting from `lastScheduleTime`, else the creation, and no earlier than `startingDeadlineSeconds` ago;
 *    more than 100 missed: `TooManyMissedTimes`, only the latest starts) gets a Job, unless it is past its
 *    starting deadline (`MissSchedule`), already started, or `concurrencyPolicy` forbids it (`Forbid` with
 *    a Job active: `JobAlreadyActive`; `Replace`: the active Jobs are deleted first). The Job is named
 *    `<cronjob>-<schedule time in minutes since the epoch>`, copies `jobTemplate` (labels, annotations, spec),
 *    is controlled by the CronJob and carries `batch.kubernetes.io/cronjob-scheduled-timestamp`
 *    (`SuccessfulCreate` "Created job NAME"); it joins `status.active` and `lastScheduleTime` is set.
 * 3. Finished Jobs beyond `successfulJobsHistoryLimit` / `failedJobsHistoryLimit` are deleted, oldest start
 *    first (`SuccessfulDelete` "Deleted job NAME"), with background propagation (the garbage collector takes
 *    their pods).
 * 4. The status is written when it changed; the key is requeued for the next schedule time (+100 ms).
 */
import type { V1CronJob, V1Job, V1ObjectReference } from '@kubernetes/client-node';
import { CronScheduleError, isTimeZone, parseCronSchedule } from '../../lib/index.ts';
import type { MergePatch } from '../runtime/api.ts';
import type { Lister } from '../runtime/cache.ts';
import { type ReconcileResult, splitKey } from '../runtime/controller.ts';
import { type ControllerContext, recordEvent } from '../runtime/context.ts';
import { errorMessage, isAlreadyExists, isNotFound, statusMessage, controllerOf } from '../../api/index.ts';
import { isJobFinished, metaTime } from '../jobs/reconcile.ts';
import { jobNameFor, nextScheduleDelayMs, nextScheduleTime, rfc1123z, rfc3339In } from './schedule.ts';

/** The writes and fresh reads of the CronJob controller. */
export interface CronJobApi {
  /** Reads the CronJob from the API server (not the cache); undefined when it does not exist. @throws ApiError */
  getCronJob(namespace: string, name: string): Promise<V1CronJob | undefined>;
  /** A JSON merge patch of `.../cronjobs/<name>/status`. @throws ApiError */
  patchCronJobStatus(namespace: string, name: string, patch: MergePatch): Promise<void>;
  /** Creates a Job. @returns the Job created @throws ApiError (409 AlreadyExists included) */
  createJob(namespace: string, job: V1Job): Promise<V1Job>;
  /** Reads a Job from the API server; undefined when it does not exist. @throws ApiError */
  getJob(namespace: string, name: string): Promise<V1Job | undefined>;
  /** Deletes a Job with background propagation, only if its uid is still `uid`. @throws ApiError (404 and 409 included) */
  deleteJob(namespace: string, name: string, uid: string): Promise<void>;
}

/** The `source.component` of the CronJob controller's events, as Kubernetes names it. */
export const CRONJOB_COMPONENT = 'cronjob-controller';

/** The annotation of a Job made for a schedule time: that time in RFC 3339, in the CronJob's zone. */
export const SCHEDULED_TIMESTAMP_ANNOTATION = 'batch.kubernetes.io/cronjob-scheduled-timestamp';

/** Node's longest timer (ms); a longer one fires at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

const isTrue = (job: V1Job, type: string) => job.status?.conditions?.some((c) => c.type === type && c.status === 'True') ?? false;

function cronJobRef(cj: V1CronJob) {
  return { apiVersion: 'batch/v1', kind: 'CronJob', namespace: cj.metadata?.namespace, name: cj.metadata?.name, uid: cj.metadata?.uid };
}

function jobReference(job: V1Job): V1ObjectReference {
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    namespace: job.metadata?.namespace,
    name: job.metadata?.name,
    uid: job.metadata?.uid,
    resourceVersion: job.metadata?.resourceVersion,
  };
}

/** The Job Kubernetes' `getJobFromTemplate2` makes for the schedule time `scheduledMs`. */
export function jobFromTemplate(cj: V1CronJob, scheduledMs: number): V1Job {
  const tpl = cj.spec?.jobTemplate;
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name: jobNameFor(cj.metadata?.name ?? '', scheduledMs),
      labels: { ...(tpl?.metadata?.labels ?? {}) },
      annotations: { ...(tpl?.metadata?.annotations ?? {}), [SCHEDULED_TIMESTAMP_ANNOTATION]: rfc3339In(scheduledMs, cj.spec?.timeZone ?? 'UTC') },
      ownerReferences: [{ apiVersion: 'batch/v1', kind: 'CronJob', name: cj.metadata?.name ?? '', uid: cj.metadata?.uid ?? '', controller: true, blockOwnerDeletion: true }],
    },
    spec: structuredClone(tpl?.spec ?? { template: {} }),
  };
}

/** What one sync decided, written at its end. */
interface SyncState {
  cj: V1CronJob;
  active: V1ObjectReference[];
  lastScheduleTime?: string;
  lastSuccessfulTime?: string;
}

/**
 * Reconciles the CronJob `namespace/name`.
 * @param cronJobs the CronJob cache
 * @param jobs the Job cache
 * @returns a requeue at the next schedule time
 * @throws ApiError when a Job create or delete, or the status write, fails (the worker retries with back-off)
 */
export async function reconcileCronJob(
  key: string,
  ctx: ControllerContext,
  cronJobs: Lister<V1CronJob>,
  jobs: Lister<V1Job>,
  api: CronJobApi,
): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const cached = cronJobs.get(name, namespace);
  if (!cached) return undefined;
  const uid = cached.metadata?.uid;
  const owned = jobs.list(namespace).filter((j) => controllerOf(j)?.uid === uid);
  const s: SyncState = {
    cj: structuredClone(cached),
    active: structuredClone(cached.status?.active ?? []),
    lastScheduleTime: timeText(cached.status?.lastScheduleTime),
    lastSuccessfulTime: timeText(cached.status?.lastSuccessfulTime),
  };
  const written = { active: s.active.map((r) => r.uid), lastScheduleTime: s.lastScheduleTime, lastSuccessfulTime: s.lastSuccessfulTime };
  let result: ReconcileResult | undefined;
  let failure: unknown;
  try {
    const fresh = await syncJobs(ctx, s, owned, api);
    if (fresh === 'gone') return undefined;
    result = await syncSchedule(ctx, s, api);
  } catch (err: unknown) {
    failure = err;
  }
  await cleanupFinishedJobs(ctx, s, owned, api);
  await writeStatus(api, s, written);
  if (failure !== undefined) throw failure;
  if (result?.requeueAfterMs !== undefined) result.requeueAfterMs = Math.min(MAX_TIMER_MS, Math.max(1, result.requeueAfterMs));
  return result;
}

const timeText = (t: unknown): string | undefined => (t === undefined || t === null ? undefined : t instanceof Date ? metaTime(t.getTime()) : String(t));

/** CronJob uid / Job uid pairs whose SawCompletedJob was recorded here, oldest first (bounded). */
const announced = new Set<string>();
const ANNOUNCED_MAX = 10_000;

/**
 * Whether the SawCompletedJob of this pair is yet to be recorded: a second sync from a cache that does not
 * show the status write of the first yet still lists the Job as active (kubectl would show `(x2)`).
 */
function firstTime(key: string): boolean {
  if (announced.has(key)) return false;
  announced.add(key);
  if (announced.size > ANNOUNCED_MAX) announced.delete(announced.values().next().value!);
  return true;
}

/** Step 1: the active list against the Jobs that exist. Answers 'gone' when the CronJob no longer exists. */
async function syncJobs(ctx: ControllerContext, s: SyncState, owned: V1Job[], api: CronJobApi): Promise<'gone' | undefined> {
  const { namespace = '', name = '' } = s.cj.metadata ?? {};
  for (const j of owned) {
    const found = s.active.some((r) => r.uid === j.metadata?.uid);
    if (!found && !isJobFinished(j)) {
      // Perhaps the cache's CronJob is older than the Job: read it again before calling the Job unexpected.
      const fresh = await api.getCronJob(namespace, name);
      if (!fresh || fresh.metadata?.uid !== s.cj.metadata?.uid) return 'gone';
      if ((fresh.status?.active ?? []).some((r) => r.uid === j.metadata?.uid)) {
        s.cj = fresh;
        s.active = structuredClone(fresh.status?.active ?? []);
        s.lastScheduleTime = timeText(fresh.status?.lastScheduleTime) ?? s.lastScheduleTime;
        s.lastSuccessfulTime = timeText(fresh.status?.lastSuccessfulTime) ?? s.lastSuccessfulTime;
        continue;
      }
      await recordEvent(ctx, cronJobRef(s.cj), 'Warning', 'UnexpectedJob', `Saw a job that the controller did not create or forgot: ${j.metadata?.name}`, {
        component: CRONJOB_COMPONENT,
      });
    } else if (found && isJobFinished(j)) {
      s.active = s.active.filter((r) => r.uid !== j.metadata?.uid);
      const condition = isTrue(j, 'Complete') ? 'Complete' : 'Failed';
      if (firstTime(`${s.cj.metadata?.uid}/${j.metadata?.uid}`)) {
        await recordEvent(ctx, cronJobRef(s.cj), 'Normal', 'SawCompletedJob', `Saw completed job: ${j.metadata?.name}, condition: ${condition}`, {
          component: CRONJOB_COMPONENT,
        });
      }
    }
    // A succeeded Job need not be listed for its completion to count (Kubernetes does this on the next sync).
    if (isTrue(j, 'Complete')) {
      const done = timeText(j.status?.completionTime);
      if (done !== undefined && (s.lastSuccessfulTime === undefined || Date.parse(done) > Date.parse(s.lastSuccessfulTime))) s.lastSuccessfulTime = done;
    }
  }
  // A listed Job that is gone (checked against the server, not only the cache) leaves the list.
  for (const ref of [...s.active]) {
    if (owned.some((j) => j.metadata?.uid === ref.uid)) continue;
    const job = await api.getJob(ref.namespace ?? namespace, ref.name ?? '');
    if (job && job.metadata?.uid === ref.uid) continue;
    await recordEvent(ctx, cronJobRef(s.cj), 'Normal', 'MissingJob', `Active job went missing: ${ref.name}`, { component: CRONJOB_COMPONENT });
    s.active = s.active.filter((r) => r.uid !== ref.uid);
  }
  return undefined;
}

/** Step 2: a Job for the schedule time due, if any. */
async function syncSchedule(ctx: ControllerContext, s: SyncState, api: CronJobApi): Promise<ReconcileResult | undefined> {
  const cj = s.cj;
  const spec = cj.spec;
  if (!spec || cj.metadata?.deletionTimestamp) return undefined;
  const ref = cronJobRef(cj);
  const event = (type: 'Normal' | 'Warning', reason: string, message: string) => recordEvent(ctx, ref, type, reason, message, { component: CRONJOB_COMPONENT });
  const tz = spec.timeZone;
  if (tz !== undefined && tz !== null && !isTimeZone(tz)) {
    await event('Warning', 'UnknownTimeZone', `invalid timeZone: "${tz}": unknown time zone ${tz}`);
    return undefined;
  }
  if (spec.suspend === true) return undefined;
  if ((spec.schedule ?? '').includes('TZ')) {
    await event('Warning', 'UnsupportedSchedule', `CRON_TZ or TZ used in schedule "${spec.schedule}" is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details`);
  }
  let schedule: ReturnType<typeof parseCronSchedule>;
  try {
    schedule = parseCronSchedule(spec.schedule ?? '', tz ?? 'UTC');
  } catch (err: unknown) {
    await event('Warning', 'UnparseableSchedule', `unparseable schedule: "${spec.schedule}" : ${err instanceof CronScheduleError ? err.message : errorMessage(err)}`);
    return undefined;
  }
  const now = ctx.clock.now();
  // The status as this sync sees it (the schedule arithmetic reads lastScheduleTime).
  const view = (): V1CronJob => ({ ...cj, status: { ...cj.status, lastScheduleTime: s.lastScheduleTime as unknown as Date } });
  const requeue = (): ReconcileResult | undefined => {
    const ms = nextScheduleDelayMs(view(), now, schedule);
    return ms === undefined ? undefined : { requeueAfterMs: ms };
  };
  const due = nextScheduleTime(view(), now, schedule);
  if (due.error !== undefined) await event('Warning', 'InvalidSchedule', `invalid schedule: ${spec.schedule} : ${due.error}`);
  if (due.missed === 'many') await event('Warning', 'TooManyMissedTimes', 'too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew');
  if (due.scheduledMs === undefined) return requeue();
  const scheduledMs = due.scheduledMs;
  const deadline = spec.startingDeadlineSeconds;
  if (typeof deadline === 'number' && scheduledMs + deadline * 1000 < now) {
    await event('Warning', 'MissSchedule', `Missed scheduled time to start a job: ${rfc1123z(scheduledMs)}`);
    return requeue();
  }
  const jobName = jobNameFor(cj.metadata?.name ?? '', scheduledMs);
  if (s.active.some((r) => r.name === jobName) || (s.lastScheduleTime !== undefined && Date.parse(s.lastScheduleTime) === scheduledMs)) return requeue();
  const policy = spec.concurrencyPolicy ?? 'Allow';
  if (policy === 'Forbid' && s.active.length > 0) {
    ctx.log.info({ cronjob: `${cj.metadata?.namespace}/${cj.metadata?.name}` }, 'not starting job: prior execution is still running and concurrency policy is Forbid');
    await event('Normal', 'JobAlreadyActive', 'Not starting job because prior execution is running and concurrency policy is Forbid');
    return requeue();
  }
  if (policy === 'Replace') {
    for (const r of [...s.active]) {
      const job = await api.getJob(r.namespace ?? cj.metadata?.namespace ?? '', r.name ?? '');
      if (!job || job.metadata?.uid !== r.uid) continue;
      await deleteJob(ctx, s, job, api);
    }
  }
  const namespace = cj.metadata?.namespace ?? 'default';
  let created: V1Job;
  try {
    created = await api.createJob(namespace, jobFromTemplate(cj, scheduledMs));
  } catch (err: unknown) {
    if (!isAlreadyExists(err)) {
      await event('Warning', 'FailedCreate', `Error creating job: ${statusMessage(err)}`);
      throw err;
    }
    // Made by an earlier sync whose status write this one's cache does not show yet: take it as made here.
    const existing = await api.getJob(namespace, jobName);
    if (!existing || controllerOf(existing)?.uid !== cj.metadata?.uid) {
      ctx.log.info({ cronjob: `${namespace}/${cj.metadata?.name}`, job: jobName }, 'job already exists and is not this cronjob\'s');
      return requeue();
    }
    created = existing;
    if (!isJobFinished(existing) && !s.active.some((r) => r.uid === existing.metadata?.uid)) s.active.push(jobReference(existing));
    s.lastScheduleTime = metaTime(scheduledMs);
    return requeue();
  }
  ctx.log.info({ cronjob: `${namespace}/${cj.metadata?.name}`, job: created.metadata?.name }, 'created job');
  await event('Normal', 'SuccessfulCreate', `Created job ${created.metadata?.name}`);
  s.active.push(jobReference(created));
  s.lastScheduleTime = metaTime(scheduledMs);
  return requeue();
}

/** Deletes a Job of the CronJob (background propagation) and takes it off the active list; false when it failed. */
async function deleteJob(ctx: ControllerContext, s: SyncState, job: V1Job, api: CronJobApi): Promise<boolean> {
  const ref = cronJobRef(s.cj);
  try {
    await api.deleteJob(job.metadata?.namespace ?? '', job.metadata?.name ?? '', job.metadata?.uid ?? '');
  } catch (err: unknown) {
    if (!isNotFound(err)) {
      await recordEvent(ctx, ref, 'Warning', 'FailedDelete', `Deleted job: ${statusMessage(err)}`, { component: CRONJOB_COMPONENT });
      return false;
    }
    s.active = s.active.filter((r) => r.uid !== job.metadata?.uid);
    return true;
  }
  s.active = s.active.filter((r) => r.uid !== job.metadata?.uid);
  await recordEvent(ctx, ref, 'Normal', 'SuccessfulDelete', `Deleted job ${job.metadata?.name}`, { component: CRONJOB_COMPONENT });
  return true;
}

/** Kubernetes' `byJobStartTime`: started before unstarted, earlier start first, then by name. */
function byStartTime(a: V1Job, b: V1Job): number {
  const ta = a.status?.startTime ? Date.parse(String(timeText(a.status.startTime))) : undefined;
  const tb = b.status?.startTime ? Date.parse(String(timeText(b.status.startTime))) : undefined;
  if (ta === undefined && tb !== undefined) return 1;
  if (ta !== undefined && tb === undefined) return -1;
  if (ta === tb) return (a.metadata?.name ?? '') < (b.metadata?.name ?? '') ? -1 : 1;
  return (ta ?? 0) - (tb ?? 0);
}

/** Step 3: finished Jobs beyond the history limits, oldest first. */
async function cleanupFinishedJobs(ctx: ControllerContext, s: SyncState, owned: V1Job[], api: CronJobApi): Promise<void> {
  const spec = s.cj.spec;
  const limits = [
    [spec?.successfulJobsHistoryLimit, owned.filter((j) => isTrue(j, 'Complete'))],
    [spec?.failedJobsHistoryLimit, owned.filter((j) => !isTrue(j, 'Complete') && isTrue(j, 'Failed'))],
  ] as const;
  for (const [limit, finished] of limits) {
    // Jobs already being deleted (by an earlier sync, whose delete the cache shows) are not counted.
    const kept = finished.filter((j) => !j.metadata?.deletionTimestamp).sort(byStartTime);
    if (typeof limit !== 'number' || kept.length <= limit) continue;
    for (const j of kept.slice(0, kept.length - limit)) await deleteJob(ctx, s, j, api);
  }
}

/** Step 4: the status, when it changed (a merge patch; `null` removes a field). */
async function writeStatus(api: CronJobApi, s: SyncState, was: { active: (string | undefined)[]; lastScheduleTime?: string; lastSuccessfulTime?: string }): Promise<void> {
  const patch: Record<string, unknown> = {};
  const uids = s.active.map((r) => r.uid);
  if (JSON.stringify(uids) !== JSON.stringify(was.active)) patch.active = s.active.length > 0 ? s.active : null;
  if (s.lastScheduleTime !== was.lastScheduleTime) patch.lastScheduleTime = s.lastScheduleTime ?? null;
  if (s.lastSuccessfulTime !== was.lastSuccessfulTime) patch.lastSuccessfulTime = s.lastSuccessfulTime ?? null;
  if (Object.keys(patch).length === 0) return;
  try {
    await api.patchCronJobStatus(s.cj.metadata?.namespace ?? 'default', s.cj.metadata?.name ?? '', { status: patch });
  } catch (err: unknown) {
    if (!isNotFound(err)) throw err;
  }
}
