/**
 * Kube32's controllers (issue 6; seed 002 "Moves", "Drain and evictions", "Policies", "Periodic checkpoints
 * and node loss", "Retention", "Limits"): the door of `src/controllers/`.
 *
 * `startControllers` builds every controller as a REST client of an API server (informers from
 * @kubernetes/client-node, then one work queue and workers each), waits until every cache has synced, then
 * starts the workers. Each controller reconciles from what it observes, and every step is safe to repeat
 * after a crash. See docs/controllers.md.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { KubeConfig } from '@kubernetes/client-node';
import { createLogger, realClock, type TimerClock } from '../lib/index.ts';
import { newHorizontalPodAutoscalerController } from './autoscaling/controller.ts';
import { newCheckpointController } from './checkpoint/controller.ts';
import { newCronJobController } from './cronjobs/controller.ts';
import { newDisruptionController } from './disruption/controller.ts';
import { newEndpointsController } from './endpoints/controller.ts';
import { newJobController } from './jobs/controller.ts';
import { newNodeLifecycleController } from './nodelifecycle/controller.ts';
import { newPodLifecycleController } from './podlifecycle/controller.ts';
import { newPolicyController } from './policy/controller.ts';
import { newResourceQuotaController } from './resourcequota/controller.ts';
import { Informers } from './runtime/cache.ts';
import type { Controller, ControllerLog } from './runtime/controller.ts';
import { type ControllerContext, type ControllerTimings, DEFAULT_TIMINGS, newSharedState } from './runtime/context.ts';
import { KubeClusterApi } from './runtime/kube-api.ts';
import { LeaderElector, type LeaderElectionOptions } from './runtime/leader.ts';
import { PodsByOwner } from './runtime/owner-index.ts';
import { newScheduler, SCHEDULER_CONNECTIONS } from './scheduler/controller.ts';
import { newServiceAccountController } from './serviceaccount/controller.ts';
import { newWorkloadControllers } from './workloads/controller.ts';

export type { ClusterApi, SnapshotAnswer } from './runtime/api.ts';
export type { ControllerTimings } from './runtime/context.ts';
export type { LeaderElectionOptions } from './runtime/leader.ts';
export { DEFAULT_TIMINGS } from './runtime/context.ts';

/** The names of the controllers, for `disable`. */
export const CONTROLLER_NAMES = [
  'scheduler',
  'checkpoint',
  'podlifecycle',
  'replicaset',
  'deployment',
  'daemonset',
  'statefulset',
  'endpoints',
  'nodelifecycle',
  'policy',
  'job',
  'cronjob',
  'disruption',
  'serviceaccount',
  'resourcequota',
  'horizontalpodautoscaler',
] as const;
export type ControllerName = (typeof CONTROLLER_NAMES)[number];

/** Options of {@link startControllers}. */
export interface StartControllersOptions {
  /** Where the API server is and who the controllers are (an admin identity). */
  kubeConfig: KubeConfig;
  /** Timings, ms; each defaults to {@link DEFAULT_TIMINGS} (the seed's and Kubernetes' values). */
  timings?: Partial<ControllerTimings>;
  /** Controllers not to run (another scheduler runs, say). */
  disable?: readonly ControllerName[];
  /**
   * Have the API server send a move's snapshot on to the target's kubelet while it stores it (`&target=` of
   * the capture, docs/checkpoints.md "Figures"): the target then holds the bytes when the replacement is
   * bound to it, and prepares the restore while the bytes arrive (src/kubelet/prepared-restores.ts), which it
   * runs once the control plane confirms the stored data. On by default (issue 26): a 16 MiB move took
   * 0.87 of the time without it (325 against 372 ms p50), and no request failed during moves with it
   * (bench/moves, test/controllers/held-requests.test.ts); `false` turns it off.
   * @default true
   */
  pushSnapshotsToTarget?: boolean;
  /** The clock. @default realClock */
  clock?: TimerClock;
  /** The logger. @default pino, component `controllers` */
  log?: ControllerLog;
  /**
   * Run the workers only while holding the Lease `kube-system/kube32-controllers` (several control planes
   * on one cluster); `true` takes the defaults (15 s lease, 10 s renew deadline, 2 s retry).
   * @default false
   */
  leaderElection?: boolean | Partial<LeaderElectionOptions>;
  /** Called when the Lease is lost while leading (the workers have stopped). @default logs only */
  onLostLeadership?: () => void;
}

/** Running controllers. */
export interface RunningControllers {
  /** Stops the workers (waiting for reconciles in progress) and the watches. */
  stop(): Promise<void>;
}

/**
 * Starts every controller against the API server of `kubeConfig`.
 * @returns once every informer has listed its resource and the workers run
 * @throws ApiError when a required resource (pods, nodes, checkpoints) cannot be listed
 * @throws RangeError when a timing is not a positive number
 * @example
 * const kc = new KubeConfig(); kc.loadFromFile('admin.kubeconfig');
 * const controllers = await startControllers({ kubeConfig: kc });
 * // ...
 * await controllers.stop();
 */
export async function startControllers(options: StartControllersOptions): Promise<RunningControllers> {
  const timings: ControllerTimings = { ...DEFAULT_TIMINGS, ...(options.timings ?? {}) };
  for (const [k, v] of Object.entries(timings)) {
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
      throw new RangeError(`startControllers: timing '${k}' must be a positive number of ms: current value is ${v}`);
    }
  }
  const clock = options.clock ?? realClock;
  const log = options.log ?? createLogger('controllers');
  const api = new KubeClusterApi(options.kubeConfig);
  const informers = new Informers(options.kubeConfig, api.rest, log);
  const ctx: ControllerContext = { api, cache: informers.caches, clock, log, timings, state: newSharedState(clock), pushSnapshotsToTarget: options.pushSnapshotsToTarget !== false };
  let elector: LeaderElector | undefined;
  if (options.leaderElection) {
    const given = typeof options.leaderElection === 'object' ? options.leaderElection : {};
    elector = new LeaderElector(api.rest, clock, log, {
      ...given,
      identity: given.identity ?? `${hostname()}_${process.pid}_${randomBytes(4).toString('hex')}`,
    });
  }
  return startWith(ctx, informers, options.disable ?? [], elector, options.onLostLeadership, options.kubeConfig);
}

async function startWith(
  ctx: ControllerContext,
  informers: Informers,
  disable: readonly ControllerName[],
  elector: LeaderElector | undefined,
  onLostLeadership: (() => void) | undefined,
  kubeConfig: KubeConfig,
): Promise<RunningControllers> {
  // kube-scheduler's own client: its binds do not queue behind the other controllers' calls.
  const schedulerApi = new KubeClusterApi(kubeConfig, { maxSockets: SCHEDULER_CONNECTIONS });
  // Indexed first, so that every controller's handler finds the index up to date.
  const podsByOwner = new PodsByOwner();
  ctx.state.podsByOwner = podsByOwner;
  informers.on('pods', (verb, pod) => podsByOwner.observe(verb, pod));
  const all: Controller[] = [
    newScheduler(ctx, informers, schedulerApi),
    newCheckpointController(ctx, informers),
    newPodLifecycleController(ctx, informers),
    ...newWorkloadControllers(ctx, informers),
    newEndpointsController(ctx, informers),
    newNodeLifecycleController(ctx, informers),
    newPolicyController(ctx, informers),
    newJobController(ctx, informers, kubeConfig),
    newCronJobController(ctx, kubeConfig),
    newDisruptionController(ctx, informers),
    newServiceAccountController(ctx, informers),
    newResourceQuotaController(ctx, informers),
    newHorizontalPodAutoscalerController(ctx, informers),
  ];
  const controllers = all.filter((c) => !disable.includes(c.name as ControllerName));
  try {
    await informers.start();
  } catch (err: unknown) {
    await informers.stop();
    (ctx.api as KubeClusterApi).rest?.close();
    schedulerApi.rest.close();
    throw err;
  }
  // Every cache has synced: queue what exists, then start the workers.
  for (const c of all) {
    if (!controllers.includes(c)) c.queue.shutDown();
  }
  primeQueues(ctx, controllers);
  let stopped = false;
  const startWorkers = () => {
    for (const c of controllers) c.start();
    ctx.log.info({ controllers: controllers.map((c) => c.name) }, 'controllers started');
  };
  if (!elector) {
    startWorkers();
  } else {
    ctx.log.info({ identity: elector.identity }, 'leader election: waiting for the Lease');
    void elector
      .run(() => {
        // Lost while leading: stop acting at once; the caller decides what the process does.
        void Promise.all(controllers.map((c) => c.stop())).then(() => onLostLeadership?.());
      })
      .then(() => {
        if (elector.leading && !stopped) startWorkers();
      });
  }
  return {
    async stop() {
      if (stopped) return;
      stopped = true;
      await informers.stop();
      await Promise.all(controllers.map((c) => c.stop()));
      await elector?.stop();
      (ctx.api as KubeClusterApi).rest?.close();
      schedulerApi.rest.close();
    },
  };
}

/** The informers' initial adds fire before the workers start; this makes sure nothing listed is missed. */
function primeQueues(ctx: ControllerContext, controllers: Controller[]): void {
  const key = (o: { metadata?: { namespace?: string; name?: string } }) =>
    o.metadata?.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : (o.metadata?.name ?? '');
  for (const c of controllers) {
    switch (c.name) {
      case 'scheduler':
      case 'podlifecycle':
        for (const p of ctx.cache.pods.list()) c.enqueue(key(p));
        break;
      case 'checkpoint':
        for (const o of ctx.cache.checkpoints.list()) c.enqueue(key(o));
        break;
      case 'replicaset':
        for (const o of ctx.cache.replicaSets.list()) c.enqueue(key(o));
        break;
      case 'deployment':
        for (const o of ctx.cache.deployments.list()) c.enqueue(key(o));
        break;
      case 'daemonset':
        for (const o of ctx.cache.daemonSets.list()) c.enqueue(key(o));
        break;
      case 'statefulset':
        for (const o of ctx.cache.statefulSets.list()) c.enqueue(key(o));
        break;
      case 'endpoints':
        for (const o of ctx.cache.services.list()) c.enqueue(key(o));
        break;
      case 'nodelifecycle':
        for (const o of ctx.cache.nodes.list()) c.enqueue(key(o));
        break;
      case 'policy':
        for (const o of ctx.cache.nodes.list()) c.enqueue(`node:${key(o)}`);
        for (const p of ctx.cache.pods.list()) c.enqueue(`pod:${key(p)}`);
        break;
      case 'disruption':
        for (const o of ctx.cache.podDisruptionBudgets.list()) c.enqueue(key(o));
        break;
      case 'serviceaccount':
        for (const o of ctx.cache.namespaces.list()) c.enqueue(key(o));
        break;
      case 'resourcequota':
        for (const o of ctx.cache.resourceQuotas.list()) c.enqueue(key(o));
        break;
    }
  }
}
