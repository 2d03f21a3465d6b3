/**
 * The Job controller's wiring: its own informer over `batch/v1` Jobs (list, then watch), the shared pod
 * informer (a pod controlled by a Job brings that Job back), and one work queue. The informer is started
 * when the workers start and stopped with them; an API server that does not serve Jobs (404) leaves the
 * controller idle. See `reconcile.ts` for what a sync does.
 */
import type { KubeConfig, V1Job, V1Pod } from '@kubernetes/client-node';
import type { Informers, Lister } from '../runtime/cache.ts';
import { Controller, keyOf } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { errorMessage, Informer, RestClient, controllerOf } from '../../api/index.ts';
import { Expectations } from '../workloads/replicaset.ts';
import { type JobApi, reconcileJob } from './reconcile.ts';

/** The list path of every Job. */
export const JOBS_PATH = '/apis/batch/v1/jobs';

/** The Job controller: a {@link Controller} whose Job informer runs while its workers do. */
export class JobController extends Controller {
  readonly #rest: RestClient;
  readonly #jobs: Informer<V1Job>;
  readonly #log: ControllerContext['log'];
  #stopped = false;

  /**
   * @param ctx the controllers' context (pods are created and deleted through `ctx.api`)
   * @param informers the shared informers (the pod events)
   * @param kubeConfig where the API server is, for the Job informer and the status writes
   */
  constructor(ctx: ControllerContext, informers: Informers, kubeConfig: KubeConfig) {
    const rest = new RestClient(kubeConfig);
    const exp = new Expectations();
    const api: JobApi = {
      async patchJobStatus(namespace, name, patch) {
        await rest.json({
          method: 'PATCH',
          path: `/apis/batch/v1/namespaces/${encodeURIComponent(namespace)}/jobs/${encodeURIComponent(name)}/status`,
          body: patch,
          contentType: 'application/merge-patch+json',
        });
      },
      async deleteJob(namespace, name, uid) {
        await rest.json({
          method: 'DELETE',
          path: `/apis/batch/v1/namespaces/${encodeURIComponent(namespace)}/jobs/${encodeURIComponent(name)}`,
          body: { apiVersion: 'v1', kind: 'DeleteOptions', propagationPolicy: 'Background', preconditions: { uid } },
        });
      },
    };
    let lister: Lister<V1Job> = { get: () => undefined, list: () => [] };
    super('job', (k) => reconcileJob(k, ctx, lister, api, exp), { clock: ctx.clock, log: ctx.log, workers: 2 });
    this.#rest = rest;
    this.#log = ctx.log;
    this.#jobs = new Informer<V1Job>({ rest, kubeConfig, path: JOBS_PATH, log: ctx.log, resource: 'jobs' });
    lister = this.#jobs;
    this.#jobs.on((verb, o) => {
      if (verb !== 'delete') this.enqueue(keyOf(o));
    });
    informers.on('pods', (_verb, pod: V1Pod) => {
      const owner = controllerOf(pod);
      if (owner?.kind === 'Job') this.enqueue(`${pod.metadata?.namespace ?? 'default'}/${owner.name}`);
    });
  }

  /** Lists the Jobs, then starts the workers (at once when the server does not serve Jobs). */
  override start(): void {
    void (async () => {
      try {
        await this.#rest.json({ method: 'GET', path: `${JOBS_PATH}?limit=1` });
        await this.#jobs.start();
      } catch (err: unknown) {
        this.#log.warn({ resource: 'jobs', err: errorMessage(err) }, 'cannot list Jobs; the Job controller idles');
        return;
      }
      if (!this.#stopped) super.start();
    })();
  }

  /** Stops the informer and the workers. */
  override async stop(): Promise<void> {
    this.#stopped = true;
    await this.#jobs.stop();
    await super.stop();
    this.#rest.close();
  }
}

/** Builds the Job controller (`batch/v1` Jobs). */
export function newJobController(ctx: ControllerContext, informers: Informers, kubeConfig: KubeConfig): JobController {
  return new JobController(ctx, informers, kubeConfig);
}
