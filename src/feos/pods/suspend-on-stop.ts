/**
 * Suspend on stop (seed 000, "Suspend on stop"): a stopping `feosd --suspend-on-stop` suspends every
 * running pod, four at a time, and records each as soon as it is suspended; the next feosd resumes the
 * recorded pods that are still suspended, four at a time, and removes the record.
 *
 * Both work through the pod service's own actions (`suspend`, `resume`), under each pod's lock, so a
 * pod's record follows its microVM exactly as it does for SuspendPod and ResumePod.
 */
import type { PodInfo } from '../gen/feos/pod/v1/pod_pb.js';
import { PodState } from '../gen/feos/pod/v1/pod_pb.js';
import type { Logger } from '../../lib/index.ts';
import { asFeosError, errorMessage } from '../api/index.ts';
import type { PodAction } from './actions.ts';

/** How many pods are suspended or resumed at a time (seed: four). */
export const STOP_CONCURRENCY = 4;
/** How often a pod whose microVM was busy is tried again (ms; seed: 5 s). */
export const BUSY_RETRY_MS = 5_000;
/** How long before the end of `--stop-grace` the stop gives up on busy pods (ms; seed: 10 s). */
export const STOP_MARGIN_MS = 10_000;

/** What the stop needs of the pod service. */
export interface StopPods {
  list(): PodInfo[];
  act(id: string, action: PodAction): Promise<PodInfo | undefined>;
  /** Resolves once no hibernation runs (their pods are not running on the node then). */
  hibernationsDone?(): Promise<void>;
}

/** Options of {@link suspendForStop}. */
export interface SuspendForStopOptions {
  /**
   * When the stop gives up (`Date.now()` ms): 10 s before `--stop-grace` ends. A snapshot that would
   * end later is cancelled at it, and the pod runs on, as on a crash of feosd.
   */
  deadline: number;
  /**
   * Records a pod before its suspend starts (the whole record is written again; one write at a time),
   * so that a stop killed mid-suspend keeps it for the next feosd. A pod whose record cannot be written
   * is not suspended: it runs on (a suspended pod that no record names would never be resumed).
   */
  record(id: string): Promise<void>;
  /** Takes a recorded pod out of the record again: its suspend failed, or it was busy to the end. */
  unrecord?(id: string): Promise<void>;
  log: Logger;
  /** @default STOP_CONCURRENCY */
  concurrency?: number;
  /** @default BUSY_RETRY_MS */
  retryMs?: number;
}

/** What a stop did. */
export interface SuspendForStopResult {
  /** Recorded, in the order they were suspended. */
  suspended: string[];
  /** Whose suspend failed: they run on and end as feosd does. */
  failed: string[];
  /** Still busy (or their lock still held) at the deadline. */
  busy: string[];
}

/** Runs `fn` over `items`, `concurrency` at a time, starting none once `go()` is false. */
async function pool<T>(items: T[], concurrency: number, go: () => boolean, fn: (item: T) => Promise<void>): Promise<T[]> {
  const queue = [...items];
  const workers = Array.from({ length: Math.min(concurrency, queue.length) }, async () => {
    while (queue.length > 0 && go()) await fn(queue.shift()!);
  });
  await Promise.all(workers);
  return queue;
}

/** Resolves with `p`'s value, or with `timedOut` at `deadline` (`Date.now()` ms); `p` runs on. */
function until<T, U>(p: Promise<T>, deadline: number, timedOut: U): Promise<T | U> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<U>((r) => {
    timer = setTimeout(() => r(timedOut), Math.max(0, deadline - Date.now()));
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/**
 * Suspends every RUNNING pod for the next feosd (seed "Suspend on stop", step 3): four at a time, each
 * recorded before its suspend starts (a pod whose record cannot be written is not suspended; one whose
 * suspend fails is taken out of the record again). A pod whose microVM is busy (UNAVAILABLE with VmBusy) is tried
 * again every 5 s after the first pass, holding none of the four places meanwhile, until it is
 * suspended or found suspended (both recorded), or until `deadline`. A pod whose suspend fails, or that
 * is still busy then, is logged and left running. It waits for the hibernations in flight, until the
 * deadline too.
 */
export async function suspendForStop(pods: StopPods, o: SuspendForStopOptions): Promise<SuspendForStopResult> {
  const concurrency = o.concurrency ?? STOP_CONCURRENCY;
  const retryMs = o.retryMs ?? BUSY_RETRY_MS;
  const result: SuspendForStopResult = { suspended: [], failed: [], busy: [] };
  // The record's writes, one at a time, in order.
  let records: Promise<unknown> = Promise.resolve();
  const serial = (fn: () => Promise<void>): Promise<void> => {
    const p = records.then(fn);
    records = p.catch(() => {});
    return p;
  };
  const recorded = new Set<string>();
  const record = async (id: string): Promise<boolean> => {
    if (recorded.has(id)) return true;
    try {
      await serial(() => o.record(id));
    } catch (err: unknown) {
      o.log.error({ id, err: errorMessage(err) }, 'suspend on stop: the record cannot be written; the pod is not suspended and runs on');
      return false;
    }
    recorded.add(id);
    return true;
  };
  const unrecord = async (id: string) => {
    if (!recorded.delete(id) || !o.unrecord) return;
    await serial(() => o.unrecord!(id)).catch((err: unknown) => o.log.error({ id, err: errorMessage(err) }, 'suspend on stop: the pod was not taken out of the record (the next feosd skips it: it is not suspended)'));
  };
  const hibernations = pods.hibernationsDone ? until(pods.hibernationsDone(), o.deadline, undefined) : Promise.resolve();
  const running = pods
    .list()
    .filter((p) => p.state === PodState.RUNNING)
    .map((p) => p.id);
  o.log.info({ pods: running, deadlineInMs: o.deadline - Date.now() }, 'suspend on stop: suspending the running pods');
  let busy: string[] = [];
  /** Pods whose suspend was still running at the deadline. */
  const late = new Set<string>();
  const attempt = async (id: string) => {
    if (!(await record(id))) {
      result.failed.push(id);
      return;
    }
    const out = await until(
      pods.act(id, { kind: 'suspend', deadline: o.deadline }).then(
        (pod) => ({ pod, err: undefined as unknown }),
        (err: unknown) => ({ pod: undefined, err }),
      ),
      o.deadline,
      'late' as const,
    );
    if (out === 'late') {
      late.add(id);
      busy.push(id);
      return;
    }
    if (out.pod?.state === PodState.SUSPENDED) {
      result.suspended.push(id);
      o.log.info({ id }, 'suspend on stop: suspended');
    } else if (asFeosError(out.err)?.busy) {
      busy.push(id);
    } else if (pods.list().find((p) => p.id === id)?.state !== PodState.RUNNING) {
      // Gone, stopped or hibernated meanwhile (a hibernation in flight ends so): not the stop's to suspend.
      await unrecord(id);
      o.log.info({ id, err: errorMessage(out.err) }, 'suspend on stop: the pod does not run any more; skipped');
    } else {
      await unrecord(id);
      result.failed.push(id);
      o.log.error({ id, err: out.err === undefined ? `the pod is ${PodState[out.pod?.state ?? 0]}` : errorMessage(out.err) }, 'suspend on stop: the suspend failed; the pod ends with feosd');
    }
  };
  const notStarted = await pool(running, concurrency, () => Date.now() < o.deadline, attempt);
  busy.push(...notStarted);
  while (busy.length > 0 && Date.now() + retryMs < o.deadline) {
    o.log.info({ pods: busy }, `suspend on stop: busy; trying again in ${retryMs / 1000} s`);
    await new Promise((r) => setTimeout(r, retryMs));
    const again = busy;
    busy = [];
    // A pod that a SuspendPod of its own suspended meanwhile is found suspended: recorded too.
    busy.push(...(await pool(again, concurrency, () => Date.now() < o.deadline, attempt)));
  }
  result.busy = busy;
  if (busy.length > 0) o.log.error({ pods: busy }, 'suspend on stop: still busy at the end of the grace; these pods run on after feosd ends');
  // A pod whose suspend is still running at the deadline stays recorded: it may end suspended.
  for (const id of busy) if (!late.has(id)) await unrecord(id);
  await hibernations;
  await records;
  return result;
}

/** Options of {@link resumeAfterStop}. */
export interface ResumeAfterStopOptions {
  log: Logger;
  /** A stop of feosd: no more resumes start; those running end. */
  signal: AbortSignal;
  /** @default STOP_CONCURRENCY */
  concurrency?: number;
}

/**
 * Resumes the pods a stop recorded that are still SUSPENDED, four at a time (seed "Suspend on stop").
 * A pod whose resume fails stays suspended and is logged; one that is gone or not suspended any more is
 * skipped.
 * @returns the pods not tried because feosd began to stop: the stop keeps them in the record
 */
export async function resumeAfterStop(pods: StopPods, ids: string[], o: ResumeAfterStopOptions): Promise<string[]> {
  const state = new Map(pods.list().map((p) => [p.id, p.state]));
  return pool(ids, o.concurrency ?? STOP_CONCURRENCY, () => !o.signal.aborted, async (id) => {
    const s = state.get(id);
    if (s !== PodState.SUSPENDED) {
      o.log.info({ id, state: s === undefined ? 'gone' : PodState[s] }, 'resume after stop: not suspended any more; skipped');
      return;
    }
    try {
      const pod = await pods.act(id, { kind: 'resume', keepSuspendedOnFailure: true });
      o.log.info({ id, state: PodState[pod?.state ?? 0] }, 'resume after stop: resumed');
    } catch (err: unknown) {
      o.log.error({ id, err: errorMessage(err) }, 'resume after stop: the resume failed; the pod stays suspended');
    }
  });
}
