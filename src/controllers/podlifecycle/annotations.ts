/**
 * The seed's pod annotations checked for what a user can get wrong (seed "Policies", "Periodic checkpoints
 * and node loss"): a value the controllers cannot use is not an error of the pod (it runs, with the value
 * named here), but the user hears of it once, as a `Warning` event `InvalidAnnotation` on the pod, instead of
 * the value being taken silently.
 *
 * | annotation | wrong | what is used instead |
 * |---|---|---|
 * | `kube32.io/migration` | not `OnDrain`, `Never` or `Auto` | `OnDrain` |
 * | `kube32.io/checkpoint-interval` | not a duration | no periodic checkpoints |
 * | `kube32.io/checkpoint-interval` | below the minimum (10 s) | the minimum |
 * | `kube32.io/placement` | not `fastest` | the default placement |
 */
import type { V1Pod } from '@kubernetes/client-node';
import { parseDuration } from '../../lib/index.ts';
import { type ControllerContext, recordPodEvent } from '../runtime/context.ts';
import { ANNOTATIONS } from '../../api/index.ts';

/** The reason of the warning event. */
export const INVALID_ANNOTATION_REASON = 'InvalidAnnotation';

/** `12000` → `12s`, `90000` → `1m30s`, `1500` → `1.5s`: a duration as the annotation would write it. */
function formatMs(ms: number): string {
  if (ms % 60_000 === 0 && ms >= 60_000) return `${ms / 60_000}m`;
  if (ms >= 60_000) return `${Math.floor(ms / 60_000)}m${formatMs(ms % 60_000)}`;
  return ms % 1000 === 0 ? `${ms / 1000}s` : ms >= 1000 ? `${ms / 1000}s` : `${ms}ms`;
}

/**
 * What is wrong with the pod's seed annotations, one message each, saying what is used instead.
 * Pure; the order is the table's.
 * @param minCheckpointIntervalMs the shortest interval (`ControllerTimings.minCheckpointIntervalMs`)
 * @example
 * annotationProblems(pod, 10_000)
 * // ['kube32.io/migration "Bogus" is not OnDrain, Never or Auto: treated as OnDrain']
 */
export function annotationProblems(pod: V1Pod, minCheckpointIntervalMs: number): string[] {
  const a = pod.metadata?.annotations ?? {};
  const out: string[] = [];
  const migration = a[ANNOTATIONS.migration];
  if (migration !== undefined && migration !== 'OnDrain' && migration !== 'Never' && migration !== 'Auto') {
    out.push(`${ANNOTATIONS.migration} ${JSON.stringify(migration)} is not OnDrain, Never or Auto: treated as OnDrain`);
  }
  const interval = a[ANNOTATIONS.checkpointInterval];
  if (interval !== undefined) {
    let ms: number | undefined;
    try {
      ms = parseDuration(interval);
    } catch {
      out.push(`${ANNOTATIONS.checkpointInterval} ${JSON.stringify(interval)} is not a duration such as "60s" or "5m": no periodic checkpoints`);
    }
    if (ms !== undefined && ms < minCheckpointIntervalMs) {
      const min = formatMs(minCheckpointIntervalMs);
      out.push(`${ANNOTATIONS.checkpointInterval} ${JSON.stringify(interval)} is below the minimum of ${min}: ${min} is used`);
    }
  }
  const placement = a[ANNOTATIONS.placement];
  if (placement !== undefined && placement !== 'fastest') {
    out.push(`${ANNOTATIONS.placement} ${JSON.stringify(placement)} is not fastest: ignored, the default placement is used`);
  }
  return out;
}

/**
 * Records each of {@link annotationProblems} as a `Warning` `InvalidAnnotation` event on the pod, once per
 * pod uid and message (a pod that changes its annotation to another wrong value hears again; a pod replaced
 * by a move has a new uid and hears again). Remembered in memory: a control plane restart warns once more.
 */
export async function warnAboutAnnotations(ctx: ControllerContext, pod: V1Pod): Promise<void> {
  const key = `${pod.metadata?.namespace ?? 'default'}/${pod.metadata?.name ?? ''}`;
  const uid = pod.metadata?.uid ?? '';
  const problems = annotationProblems(pod, ctx.timings.minCheckpointIntervalMs);
  let entry = ctx.state.annotationWarnings.get(key);
  if (problems.length === 0) {
    if (entry && entry.uid !== uid) ctx.state.annotationWarnings.delete(key);
    return;
  }
  if (!entry || entry.uid !== uid) {
    entry = { uid, warned: new Set() };
    ctx.state.annotationWarnings.set(key, entry);
  }
  for (const message of problems) {
    if (entry.warned.has(message)) continue;
    entry.warned.add(message);
    ctx.log.warn({ pod: key, problem: message }, 'pod annotation');
    await recordPodEvent(ctx, pod, 'Warning', INVALID_ANNOTATION_REASON, message);
  }
}

/** Forgets the warnings of a pod that is gone. */
export function forgetAnnotationWarnings(ctx: ControllerContext, key: string): void {
  ctx.state.annotationWarnings.delete(key);
}
