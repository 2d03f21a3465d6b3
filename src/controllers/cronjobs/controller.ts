/**
 * The CronJob controller's wiring: its own informers over `batch/v1` CronJobs and Jobs (list, then watch),
 * and one work queue. A CronJob's add or update queues it; a Job's add, update or delete queues the CronJob
 * that controls it. The informers start when the workers start and stop with them; an API server that does
 * not serve CronJobs (404) leaves the controller idle. See `reconcile.ts` for what a sync does, and
 * `schedule.ts` for the schedule arithmetic.
 */
import type { KubeConfig, V1CronJob, V1Job } from '@kubernetes/client-node';
import type { Lister } from '../runtime/cache.ts';
import { Controller, keyOf } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { errorMessage, Informer, isNotFound, RestClient, controllerOf } from '../../api/index.ts';
import { type CronJobApi, reconcileCronJob } from './reconcile.ts';

/** The list path of every CronJob. */
export const CRONJOBS_PATH = '/apis/batch/v1/cronjobs';
/** The list path of every Job. */
const JOBS_PATH = '/apis/batch/v1/jobs';

const nsPath = (namespace: string, plural: string, name?: string) =>
  `/apis/batch/v1/namespaces/${encodeURIComponent(namespace)}/${plural}${name === undefined ? '' : `/${encodeURIComponent(name)}`}`;

/** The CronJob controller: a {@link Controller} whose CronJob and Job informers run while its workers do. */
export class CronJobController extends Controller {
  readonly #rest: RestClient;
  readonly #cronJobs: Informer<V1CronJob>;
  readonly #jobs: Informer<V1Job>;
  readonly #log: ControllerContext['log'];
  #stopped = false;

  /**
   * @param ctx the controllers' context (its clock decides when a schedule is due; its events are recorded)
   * @param kubeConfig where the API server is, for the informers, the Job writes and the status writes
   */
  constructor(ctx: ControllerContext, kubeConfig: KubeConfig) {
    const rest = new RestClient(kubeConfig);
    const getOrUndefined = async <T>(path: string): Promise<T | undefined> => {
      try {
        return await rest.json<T>({ method: 'GET', path });
      } catch (err: unknown) {
        if (isNotFound(err)) return undefined;
        throw err;
      }
    };
    const api: CronJobApi = {
      getCronJob: (namespace, name) => getOrUndefined<V1CronJob>(nsPath(namespace, 'cronjobs', name)),
      async patchCronJobStatus(namespace, name, patch) {
        await rest.json({ method: 'PATCH', path: `${nsPath(namespace, 'cronjobs', name)}/status`, body: patch, contentType: 'application/merge-patch+json' });
      },
      createJob: (namespace, job) => rest.json<V1Job>({ method: 'POST', path: nsPath(namespace, 'jobs'), body: job }),
      getJob: (namespace, name) => getOrUndefined<V1Job>(nsPath(namespace, 'jobs', name)),
      async deleteJob(namespace, name, uid) {
        await rest.json({
          method: 'DELETE',
          path: nsPath(namespace, 'jobs', name),
          body: { apiVersion: 'v1', kind: 'DeleteOptions', propagationPolicy: 'Background', preconditions: { uid } },
        });
      },
    };
    let cronJobs: Lister<V1CronJob> = { get: () => undefined, list: () => [] };
    let jobs: Lister<V1Job> = { get: () => undefined, list: () => [] };
    super('cronjob', (k) => reconcileCronJob(k, ctx, cronJobs, jobs, api), { clock: ctx.clock, log: ctx.log, workers: 2 });
    this.#rest = rest;
    this.#log = ctx.log;
    this.#cronJobs = new Informer<V1CronJob>({ rest, kubeConfig, path: CRONJOBS_PATH, log: ctx.log });
    this.#jobs = new Informer<V1Job>({ rest, kubeConfig, path: JOBS_PATH, log: ctx.log });
    cronJobs = this.#cronJobs;
    jobs = this.#jobs;
    this.#cronJobs.on((verb, o) => {
      if (verb !== 'delete') this.enqueue(keyOf(o));
    });
    this.#jobs.on((_verb, job) => {
      const owner = controllerOf(job);
      if (owner?.kind === 'CronJob') this.enqueue(`${job.metadata?.namespace ?? 'default'}/${owner.name}`);
    });
  }

  /** Lists the Jobs and the CronJobs, then starts the workers (never, when the server serves no CronJobs). */
  override start(): void {
    void (async () => {
      try {
        await this.#rest.json({ method: 'GET', path: `${CRONJOBS_PATH}?limit=1` });
        // Jobs first: a CronJob's first sync must see the Jobs it already has.
        await this.#jobs.start();
        await this.#cronJobs.start();
      } catch (err: unknown) {
        this.#log.warn({ resource: 'cronjobs', err: errorMessage(err) }, 'cannot list CronJobs; the CronJob controller idles');
        return;
      }
      if (!this.#stopped) super.start();
    })();
  }

  /** Stops the informers and the workers. */
  override async stop(): Promise<void> {
    this.#stopped = true;
    await Promise.all([this.#cronJobs.stop(), this.#jobs.stop()]);
    await super.stop();
    this.#rest.close();
  }
}

/** Builds the CronJob controller (`batch/v1` CronJobs). */
export function newCronJobController(ctx: ControllerContext, kubeConfig: KubeConfig): CronJobController {
  return new CronJobController(ctx, kubeConfig);
}
