/**
 * The Job sync (Kubernetes' job controller, `pkg/controller/job`, for NonIndexed Jobs): pods made from the
 * template, named `<job>-<5 random chars>` and controlled by the Job, at most `parallelism` active at once
 * and no more than the completions still missing; the status kubectl prints (`active`, `ready`,
 * `succeeded`, `failed`, `terminating`, `startTime`, `completionTime`) and the conditions `kubectl wait`
 * reads:
 *
 * - `succeeded >= completions` (or, without `completions`, a pod succeeded and none is active):
 *   `SuccessCriteriaMet` then, once no pod of the Job still runs, `Complete` (reason `CompletionsReached`)
 *   with `completionTime`, and the `Completed` event "Job completed";
 * - `failed > backoffLimit`: `FailureTarget` then `Failed`, reason `BackoffLimitExceeded` ("Job has reached
 *   the specified backoff limit"); `activeDeadlineSeconds` passed since `startTime`: reason
 *   `DeadlineExceeded` ("Job was active longer than specified deadline"). The active pods are deleted and
 *   the terminal condition waits until they are gone, as in Kubernetes 1.32;
 * - `ttlSecondsAfterFinished`: that many seconds after it finished (`completionTime`, or the `Failed`
 *   condition's time) the Job is deleted, and its pods with it (Kubernetes' TTL-after-finished controller);
 * - `suspend: true`: no pod, the active ones deleted, `Suspended` (reason `JobSuspended`), `startTime` cleared;
 *   resumed: `Suspended` False (reason `JobResumed`).
 *
 * Only pod-level `Failed` counts as a failure: a pod of `restartPolicy: OnFailure` is restarted by its
 * kubelet and fails only when the kubelet gives up. Counts are those of the Job's pods that exist, never less
 * than the status already says (pods deleted by hand after they ended are not forgotten; without
 * Kubernetes' tracking finalizer, a pod deleted while it ran is not counted as a failure).
 */
import type { V1Job, V1JobCondition, V1Pod } from '@kubernetes/client-node';
import type { Lister } from '../runtime/cache.ts';
import { type ReconcileResult, splitKey } from '../runtime/controller.ts';
import { type ControllerContext, recordEvent } from '../runtime/context.ts';
import { errorMessage, isConflict, isNotFound, statusMessage, isPodActive, isPodReady } from '../../api/index.ts';
import type { MergePatch } from '../runtime/api.ts';
import { podFromTemplate } from '../runtime/pods.ts';
import { slowStartBatch } from '../runtime/slow-start.ts';
import { BURST_REPLICAS, type Expectations, ownedPods, SLOW_START_INITIAL_BATCH } from '../workloads/replicaset.ts';

/** The writes of the Job controller that the common {@link ClusterApi} does not have. */
export interface JobApi {
  /** A JSON merge patch of `.../jobs/<name>/status`. @throws ApiError */
  patchJobStatus(namespace: string, name: string, patch: MergePatch): Promise<void>;
  /**
   * Deletes the Job with background propagation (the garbage collector then deletes its pods), only if its
   * uid is still `uid`. @throws ApiError (404 and 409 included)
   */
  deleteJob(namespace: string, name: string, uid: string): Promise<void>;
}

/** The `source.component` of the Job controller's events, as Kubernetes names it. */
export const JOB_COMPONENT = 'job-controller';

/** Reasons and messages of the Job conditions (Kubernetes' `batch.JobReason*` and the controller's texts). */
export const JOB_REASONS = {
  completionsReached: { reason: 'CompletionsReached', message: 'Reached expected number of succeeded pods' },
  backoffLimitExceeded: { reason: 'BackoffLimitExceeded', message: 'Job has reached the specified backoff limit' },
  deadlineExceeded: { reason: 'DeadlineExceeded', message: 'Job was active longer than specified deadline' },
  suspended: { reason: 'JobSuspended', message: 'Job suspended' },
  resumed: { reason: 'JobResumed', message: 'Job resumed' },
} as const;

/** `metav1.Time` of `ms`: RFC 3339 in whole seconds. */
export function metaTime(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

const isTrue = (job: V1Job, type: string) => job.status?.conditions?.some((c) => c.type === type && c.status === 'True') ?? false;

/** Whether the Job has finished: `Complete` or `Failed` is True. */
export function isJobFinished(job: V1Job): boolean {
  return isTrue(job, 'Complete') || isTrue(job, 'Failed');
}

function jobRef(job: V1Job) {
  return { apiVersion: 'batch/v1', kind: 'Job', namespace: job.metadata?.namespace, name: job.metadata?.name, uid: job.metadata?.uid };
}

/** Sets (or adds) the condition `type` in `list`, keeping `lastTransitionTime` when its status is unchanged. */
function setCondition(list: V1JobCondition[], type: string, status: 'True' | 'False', r: { reason: string; message: string }, now: string): void {
  const i = list.findIndex((c) => c.type === type);
  const prev = list[i];
  if (prev && prev.status === status && prev.reason === r.reason && prev.message === r.message) return;
  const cond = {
    type,
    status,
    reason: r.reason,
    message: r.message,
    lastProbeTime: now,
    lastTransitionTime: prev && prev.status === status ? prev.lastTransitionTime : now,
  } as unknown as V1JobCondition;
  if (i >= 0) list[i] = cond;
  else list.push(cond);
}

/**
 * Reconciles the Job `namespace/name`.
 * @returns a requeue at the `activeDeadlineSeconds` deadline while the Job runs with one
 * @throws ApiError when a pod create or the status write fails (the worker retries with back-off)
 */
export async function reconcileJob(
  key: string,
  ctx: ControllerContext,
  jobs: Lister<V1Job>,
  api: JobApi,
  exp: Expectations,
): Promise<ReconcileResult | undefined> {
  const { namespace, name } = splitKey(key);
  const job = jobs.get(name, namespace);
  if (!job || job.metadata?.deletionTimestamp) return undefined;
  const now = ctx.clock.now();
  if (isJobFinished(job) && job.spec?.ttlSecondsAfterFinished !== undefined) {
    const finished = finishTime(job);
    const expires = finished + job.spec.ttlSecondsAfterFinished * 1000;
    if (now < expires) return { requeueAfterMs: expires - now };
    try {
      await api.deleteJob(namespace, name, job.metadata?.uid ?? '');
      ctx.log.info({ job: key, ttlSecondsAfterFinished: job.spec.ttlSecondsAfterFinished }, 'deleted finished job (ttlSecondsAfterFinished)');
    } catch (err: unknown) {
      if (!isNotFound(err) && !isConflict(err)) throw err;
    }
    return undefined;
  }
  const nowTime = metaTime(now);
  const pods = ownedPods(ctx, namespace, job.metadata?.uid);
  exp.observe(key, pods, now);
  const active = pods.filter((p) => isPodActive(p) && !exp.isDeleting(key, p.metadata?.uid ?? ''));
  // Being deleted and not ended yet (or deleted by this controller and not shown so by the cache yet).
  const terminating = pods.filter(
    (p) => (p.metadata?.deletionTimestamp || exp.isDeleting(key, p.metadata?.uid ?? '')) && p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed',
  );
  const status = job.status ?? {};
  const succeeded = Math.max(status.succeeded ?? 0, pods.filter((p) => p.status?.phase === 'Succeeded').length);
  const failed = Math.max(status.failed ?? 0, pods.filter((p) => p.status?.phase === 'Failed').length);
  const conditions: V1JobCondition[] = structuredClone(status.conditions ?? []);
  const spec = job.spec;
  let startTime = status.startTime as unknown as string | undefined;
  let completionTime = status.completionTime as unknown as string | undefined;
  let requeueAfterMs: number | undefined;
  /** Deletes the active pods; answers whether none was left running (the terminal condition may be set). */
  const deleteActive = async (): Promise<boolean> => {
    const had = active.length;
    await Promise.all(active.map((p) => deleteJobPod(ctx, job, key, p, exp, now)));
    active.length = 0;
    return had === 0 && terminating.length === 0;
  };

  if (!isJobFinished(job)) {
    const suspend = spec?.suspend === true;
    if (!suspend && startTime === undefined) startTime = nowTime;
    const completions = spec?.completions;
    let failure: { reason: string; message: string } | undefined;
    const target = conditions.find((c) => c.type === 'FailureTarget' && c.status === 'True');
    if (target) failure = { reason: target.reason ?? '', message: target.message ?? '' };
    else if (failed > (spec?.backoffLimit ?? 6)) failure = JOB_REASONS.backoffLimitExceeded;
    else if (!suspend && spec?.activeDeadlineSeconds !== undefined && startTime !== undefined) {
      const deadline = Date.parse(startTime) + spec.activeDeadlineSeconds * 1000;
      if (now >= deadline) failure = JOB_REASONS.deadlineExceeded;
      else requeueAfterMs = deadline - now;
    }
    const success =
      isTrue(job, 'SuccessCriteriaMet') || (completions !== undefined ? succeeded >= completions : succeeded > 0 && active.length === 0);
    if (failure) {
      requeueAfterMs = undefined;
      setCondition(conditions, 'FailureTarget', 'True', failure, nowTime);
      if (await deleteActive()) {
        setCondition(conditions, 'Failed', 'True', failure, nowTime);
        if (firstTime(job, 'Failed')) await recordEvent(ctx, jobRef(job), 'Warning', failure.reason, failure.message, { component: JOB_COMPONENT });
      }
    } else if (success) {
      requeueAfterMs = undefined;
      setCondition(conditions, 'SuccessCriteriaMet', 'True', JOB_REASONS.completionsReached, nowTime);
      if (await deleteActive()) {
        setCondition(conditions, 'Complete', 'True', JOB_REASONS.completionsReached, nowTime);
        completionTime = nowTime;
        if (firstTime(job, 'Complete')) await recordEvent(ctx, jobRef(job), 'Normal', 'Completed', 'Job completed', { component: JOB_COMPONENT });
      }
    } else if (suspend) {
      await deleteActive();
      startTime = undefined;
      if (!isTrue(job, 'Suspended')) {
        setCondition(conditions, 'Suspended', 'True', JOB_REASONS.suspended, nowTime);
        if (firstTime(job, `Suspended/${job.metadata?.generation}`)) await recordEvent(ctx, jobRef(job), 'Normal', 'Suspended', JOB_REASONS.suspended.message, { component: JOB_COMPONENT });
      }
    } else {
      if (isTrue(job, 'Suspended')) {
        setCondition(conditions, 'Suspended', 'False', JOB_REASONS.resumed, nowTime);
        if (firstTime(job, `Resumed/${job.metadata?.generation}`)) await recordEvent(ctx, jobRef(job), 'Normal', 'Resumed', JOB_REASONS.resumed.message, { component: JOB_COMPONENT });
      }
      await manageActive(ctx, job, key, active, succeeded, exp, now);
    }
  }
  await writeStatus(api, job, {
    active: active.length + (isJobFinished(job) ? 0 : exp.pendingCreates(key)),
    ready: active.filter(isPodReady).length,
    succeeded,
    failed,
    terminating: terminating.length,
    startTime,
    completionTime,
    conditions,
  });
  return requeueAfterMs === undefined ? undefined : { requeueAfterMs };
}

/** When a finished Job finished, ms since the epoch: `completionTime`, else its terminal condition's time. */
function finishTime(job: V1Job): number {
  const done = job.status?.completionTime ?? job.status?.conditions?.find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True')?.lastTransitionTime;
  const t = Date.parse(String(done ?? ''));
  return Number.isNaN(t) ? 0 : t;
}

/** Creates the pods missing (or deletes the extra ones) for `parallelism` and the completions still missing. */
async function manageActive(
  ctx: ControllerContext,
  job: V1Job,
  key: string,
  active: V1Pod[],
  succeeded: number,
  exp: Expectations,
  now: number,
): Promise<void> {
  const parallelism = job.spec?.parallelism ?? 1;
  const completions = job.spec?.completions;
  // A work queue (no completions): once one pod succeeded no new one starts, and the running ones are
  // left to finish their items (Kubernetes' manageJob: "leave whatever is running, running").
  const want = completions !== undefined ? Math.max(0, Math.min(parallelism, completions - succeeded)) : succeeded > 0 ? Math.min(active.length, parallelism) : parallelism;
  const have = active.length + exp.pendingCreates(key);
  if (have < want) {
    const outcome = await slowStartBatch(Math.min(BURST_REPLICAS, want - have), SLOW_START_INITIAL_BATCH, async (i) => {
      const created = await ctx.api.createPod(job.metadata?.namespace ?? 'default', podFromTemplate(job, { apiVersion: 'batch/v1', kind: 'Job' }));
      exp.created(key, created.metadata?.uid ?? `unknown-${now}-${i}`, now);
      ctx.log.info({ job: key, pod: created.metadata?.name }, 'created pod');
      await recordEvent(ctx, jobRef(job), 'Normal', 'SuccessfulCreate', `Created pod: ${created.metadata?.name}`, { component: JOB_COMPONENT });
    });
    if (outcome.error !== undefined) {
      ctx.log.warn({ job: key, err: errorMessage(outcome.error) }, 'cannot create pod');
      await recordEvent(ctx, jobRef(job), 'Warning', 'FailedCreate', `Error creating: ${statusMessage(outcome.error)}`, { component: JOB_COMPONENT });
      throw outcome.error;
    }
  } else if (active.length > want) {
    // Parallelism lowered: the newest and least advanced go first.
    const victims = [...active]
      .sort((a, b) => Number(isPodReady(a)) - Number(isPodReady(b)) || Date.parse(String(b.metadata?.creationTimestamp)) - Date.parse(String(a.metadata?.creationTimestamp)))
      .slice(0, active.length - want);
    await Promise.all(victims.map((p) => deleteJobPod(ctx, job, key, p, exp, now)));
  }
}

async function deleteJobPod(ctx: ControllerContext, job: V1Job, key: string, pod: V1Pod, exp: Expectations, now: number): Promise<void> {
  try {
    await ctx.api.deletePod(job.metadata?.namespace ?? 'default', pod.metadata?.name ?? '', { uid: pod.metadata?.uid });
  } catch (err: unknown) {
    if (isNotFound(err) || isConflict(err)) return;
    throw err;
  }
  exp.deleted(key, pod.metadata?.uid ?? '', now);
  await recordEvent(ctx, jobRef(job), 'Normal', 'SuccessfulDelete', `Deleted pod: ${pod.metadata?.name}`, { component: JOB_COMPONENT });
}

interface JobStatusView {
  active: number;
  ready: number;
  succeeded: number;
  failed: number;
  terminating: number;
  startTime: string | undefined;
  completionTime: string | undefined;
  conditions: V1JobCondition[];
}

/** Writes the status when it changed (a merge patch; `null` removes a field). */
/** Job uid/condition pairs whose event was recorded here, oldest first (bounded). */
const announced = new Set<string>();
const ANNOUNCED_MAX = 10_000;

/**
 * Whether the Job's event for `condition` (Complete, Failed; Suspended or Resumed with the spec's
 * generation) is yet to be recorded: a second sync from a cache that does not show the condition yet
 * would record it again (kubectl showed `Completed (x2)`).
 */
function firstTime(job: V1Job, condition: string): boolean {
  const key = `${job.metadata?.uid}/${condition}`;
  if (announced.has(key)) return false;
  announced.add(key);
  if (announced.size > ANNOUNCED_MAX) announced.delete(announced.values().next().value!);
  return true;
}

async function writeStatus(api: JobApi, job: V1Job, next: JobStatusView): Promise<void> {
  const cur = job.status ?? {};
  const want: Record<string, unknown> = {
    active: next.active || undefined,
    ready: next.ready,
    succeeded: next.succeeded || undefined,
    failed: next.failed || undefined,
    terminating: next.terminating,
    startTime: next.startTime,
    completionTime: next.completionTime,
    conditions: next.conditions.length > 0 ? next.conditions : undefined,
  };
  const have = cur as unknown as Record<string, unknown>;
  const patch: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(want)) {
    const was = have[k];
    if (JSON.stringify(was ?? null) === JSON.stringify(v ?? null)) continue;
    patch[k] = v === undefined ? null : v;
  }
  if (Object.keys(patch).length === 0) return;
  try {
    await api.patchJobStatus(job.metadata?.namespace ?? 'default', job.metadata?.name ?? '', { status: patch });
  } catch (err: unknown) {
    if (!isNotFound(err)) throw err;
  }
}
