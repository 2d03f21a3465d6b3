/**
 * The kubelet of the FeOS nodes (issue 18 "Running microVM pods"; docs/feos/cluster-pods.md): a controller
 * in the control plane, as virtual-kubelet is for other backends, that runs the Pods bound to FeOS nodes as
 * FeOS pods over the nodes' node connections (./../node-client.ts).
 *
 * For each FeOS node with a node connection it keeps the node's pods (ListPods, then WatchPodEvents). Every
 * second, and at every event of a Pod on a FeOS node, each Pod there is brought towards its FeOS pod:
 * - none yet: CreatePod (ID {@link feosPodIdOf}; ./spec.ts; the pull token from `imagePullSecrets`, read
 *   when needed and never written anywhere), with `Pulling` events; a CreatePod the node refuses
 *   (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ...) is a Warning `FailedCreatePodSandBox`
 *   naming the gRPC code and the node's message, the containers waiting (InvalidImageName,
 *   CreateContainerConfigError, CreateContainerError), and a new try after a back-off of 10 s doubling to 5 min
 *   (at once when the containers change, e.g. `kubectl set image`), as a kubelet retries a sandbox;
 * - its FeOS pod's changes: the Pod's status (./status.ts) and the events `Pulled`, `Created`, `Started`;
 *   a bring-up whose container create failed (`container X: create: ...`, the pull) is `ErrImagePull`, then
 *   `ImagePullBackOff` until StartPod tries again after a back-off (10 s doubling to 5 min), as a kubelet
 *   does; another failure is brought up again the same way under `CrashLoopBackOff` unless the restart
 *   policy says not to;
 * - the Pod being deleted (its deletionTimestamp): `Killing`, StopPod within its grace period, DeletePod,
 *   then the Pod's final delete (grace 0, its uid as precondition), as the Wasm kubelet finishes a graceful
 *   deletion;
 * - a FeOS pod whose metadata names this cluster (`kube32.cluster-id`: the uid of `kube-system`) and whose
 *   Pod is gone: stopped and deleted. FeOS pods made otherwise (feosctl, another cluster) are left alone.
 * After the control plane's restart nothing is created twice: a Pod whose FeOS pod runs is adopted (its
 * status follows the pod's events again).
 */
import type http2 from 'node:http2';
import { randomBytes } from 'node:crypto';
import type { KubeConfig, V1Node, V1Pod } from '@kubernetes/client-node';
import { ANNOTATIONS, errorMessage, feosPodIdOf, Informer, isApiError, RestClient } from '../../api/index.ts';
import type { Logger } from '../../lib/index.ts';
import { type PodInfo, PodService, PodState } from '../../feos/gen/feos/pod/v1/pod_pb.js';
import { GrpcCallError, serverStream, unary } from '../node-client.ts';
import { RUNTIME_FEOS, RUNTIME_LABEL } from '../nodes.ts';
import { feosPodSpec, META, pullTokenOf } from './spec.ts';
import { podStatusOf, type LocalState } from './status.ts';
import { startMicrovmMoves } from './move.ts';

/** gRPC codes the kubelet tells apart. */
const NOT_FOUND = 5;
const ALREADY_EXISTS = 6;
const INVALID_ARGUMENT = 3;

/** gRPC codes by number as grpc-go prints them (`rpc error: code = InvalidArgument desc = ...`), as a kubelet's events show a runtime's errors. */
const GRPC_CODE_NAMES = [
  'OK',
  'Canceled',
  'Unknown',
  'InvalidArgument',
  'DeadlineExceeded',
  'NotFound',
  'AlreadyExists',
  'PermissionDenied',
  'ResourceExhausted',
  'FailedPrecondition',
  'Aborted',
  'OutOfRange',
  'Unimplemented',
  'Internal',
  'Unavailable',
  'DataLoss',
  'Unauthenticated',
];

/** The longest back-off of a refused CreatePod (a kubelet's MaxContainerBackOff), ms. */
const MAX_BACKOFF_MS = 300_000;

/** Options of {@link startFeosKubelet}. */
export interface FeosKubeletOptions {
  /** The control plane's kubeconfig (the admin's). */
  kubeConfig: KubeConfig;
  /** The newest node connection of a FeOS node, or undefined (the fleet server's `nodeConnection`). */
  connection(node: string): http2.ClientHttp2Session | undefined;
  log: Logger;
  /** How often every Pod is looked at, ms. @default 1000 */
  resyncMs?: number;
  /** The first back-off of a failed bring-up, ms (doubling to 5 min). @default 10000 */
  backoffMs?: number;
}

/** A running kubelet of FeOS nodes. */
export interface FeosKubelet {
  /** Takes a node's report (the fleet server's `onReport`): its pods, for the sweep of orphans. */
  report(node: string, pods: readonly PodInfo[], stale: boolean): void;
  stop(): Promise<void>;
}

/** A FeOS node's pods as its node connection shows them. */
class NodePods {
  session: http2.ClientHttp2Session | undefined;
  /** Whether ListPods answered on this session. */
  listed = false;
  readonly infos = new Map<string, PodInfo>();
  /** The pods of the node's last fresh report (for the sweep while nothing is watched). */
  reported: readonly PodInfo[] | undefined;
  #abort: AbortController | undefined;
  /** No new watch before this time (ms): a watch that ended is not started again at once. */
  #retryAt = 0;
  #retryMs = 1000;

  /** Starts watching and listing the node's pods anew when its connection is not the one watched. */
  ensure(session: http2.ClientHttp2Session | undefined, log: Logger, onChange: () => void): void {
    if (session === this.session && session && !session.closed) return;
    this.#abort?.abort();
    this.session = undefined;
    this.listed = false;
    if (!session || session.closed || Date.now() < this.#retryAt) return;
    this.session = session;
    const since = Date.now();
    const abort = new AbortController();
    this.#abort = abort;
    const take = (p: PodInfo) => {
      const had = this.infos.get(p.id);
      if (!had || had.generation <= p.generation) this.infos.set(p.id, p);
    };
    serverStream(
      session,
      PodService.method.watchPodEvents,
      {},
      (e) => {
        if (e.deleted) this.infos.delete(e.podId);
        else if (e.pod) take(e.pod);
        onChange();
      },
      { signal: abort.signal },
    )
      .catch((err: unknown) => {
        if (!abort.signal.aborted) log.info({ err: errorMessage(err) }, 'the node\'s pod events ended; watching again');
      })
      .finally(() => {
        if (abort.signal.aborted) return;
        // Again after 1 s, doubling to 30 s while watches end soon after their start.
        this.#retryMs = Date.now() - since > 30_000 ? 1000 : Math.min(this.#retryMs * 2, 30_000);
        this.#retryAt = Date.now() + this.#retryMs;
        if (this.session === session) this.session = undefined;
      });
    unary(session, PodService.method.listPods, {}, { timeoutMs: 30_000, signal: abort.signal }).then(
      (r) => {
        const seen = new Set<string>();
        for (const p of r.pods) {
          seen.add(p.id);
          take(p);
        }
        for (const id of this.infos.keys()) if (!seen.has(id)) this.infos.delete(id);
        this.listed = true;
        onChange();
      },
      (err: unknown) => {
        if (abort.signal.aborted) return;
        log.warn({ err: errorMessage(err) }, 'ListPods failed; listing again');
        if (this.session === session) this.session = undefined;
      },
    );
  }

  stop(): void {
    this.#abort?.abort();
    this.session = undefined;
    this.listed = false;
  }
}

/** What the kubelet keeps of one Pod (by uid) between its looks. */
interface PodWork {
  busy: boolean;
  /** This process saw the FeOS pod PENDING (so Pulled, Created, Started are news). */
  sawPending: boolean;
  startedEvents: boolean;
  /** Restored by this process (where from, see MicrovmMoves.restore): its events are Pulled and Restored, not Created and Started. */
  restoredFrom?: string;
  restartCount: number;
  waiting?: { reason: string; message: string };
  /** The FeOS pod generation whose failure was taken in. */
  failedGeneration?: bigint;
  /** When the next StartPod may run (ms), and when ErrImagePull turns ImagePullBackOff. */
  nextStartAt: number;
  backOffAt: number;
  backoffMs: number;
  pullImage?: string;
  deleting?: Promise<void>;
  /** The status last written, as JSON. */
  written?: string;
  /** A Pod whose spec the kubelet cannot turn into a FeOS PodSpec (a quantity that is none): not tried again. */
  refused?: boolean;
  /**
   * CreatePod failed (the node refused the microVM: FailedCreatePodSandBox): no new try before `at` (ms), the
   * next back-off `backoffMs` (10 s doubling to 5 min), `spec` the containers it was refused for (a changed
   * image is tried at once), `event` the Event of the last refusal (a refusal again with the same message
   * counts in it, as a kubelet's recorder aggregates).
   */
  create?: { at: number; backoffMs: number; spec: string; event?: { name: string; message: string; count: number } };
  /** A restore (a move's, a rollback's) failed: the Pod was ended `Failed`, `RestoreError`. */
  restoreFailed?: boolean;
}

function keyOf(pod: V1Pod): string {
  return `${pod.metadata?.namespace}/${pod.metadata?.name}`;
}

/**
 * The node's address as a Pod's hostIP: its first InternalIP that is not link-local (a FeOS node also lists
 * the pods' network's 169.254.0.0/16 gateway), else its first InternalIP.
 */
function internalIp(node: V1Node | undefined): string | undefined {
  const ips = (node?.status?.addresses ?? []).filter((a) => a.type === 'InternalIP').map((a) => a.address);
  return ips.find((ip) => !ip.startsWith('169.254.') && !/^fe80:/i.test(ip)) ?? ips[0];
}

function grpcCode(err: unknown): number | undefined {
  return err instanceof GrpcCallError ? err.code : undefined;
}

/**
 * The start of the `reason` feosd gives a pod it fenced (src/feos/fleet/fleet.ts, `FENCED_REASON`: its
 * control plane unreachable for `--fence-after`); such a pod is resumed while its Pod is bound to its node.
 */
const FENCED_REASON = 'fenced:';

/**
 * Starts the kubelet of FeOS nodes: its informers of Pods and FeOS Nodes, then its looks.
 * @throws ApiError when `kube-system` cannot be read (the cluster's ID)
 */
export async function startFeosKubelet(o: FeosKubeletOptions): Promise<FeosKubelet> {
  const log = o.log;
  const rest = new RestClient(o.kubeConfig, { userAgent: 'kube32-feos-kubelet' });
  const clusterId = (await rest.json<{ metadata?: { uid?: string } }>({ method: 'GET', path: '/api/v1/namespaces/kube-system' })).metadata?.uid ?? '';
  const pods = new Informer<V1Pod>({ rest, path: '/api/v1/pods', resource: 'pods', log });
  const nodes = new Informer<V1Node>({ rest, path: '/api/v1/nodes', labelSelector: `${RUNTIME_LABEL}=${RUNTIME_FEOS}`, resource: 'nodes', log });
  const nodePods = new Map<string, NodePods>();
  const work = new Map<string, PodWork>();
  /** FeOS pod IDs being deleted as orphans. */
  const orphans = new Set<string>();
  const firstBackoff = o.backoffMs ?? 10_000;
  let stopped = false;
  // Moves of microVM pods (./move.ts): the hibernation on the source, the restore on the target.
  const moves = startMicrovmMoves({ rest, log, pods, isFeosNode: (n) => nodes.get(n) !== undefined, connection: o.connection });

  /** Records an Event on the Pod; its name, or undefined when it was not recorded. */
  const event = async (pod: V1Pod, type: 'Normal' | 'Warning', reason: string, message: string): Promise<string | undefined> => {
    const node = pod.spec?.nodeName ?? '';
    const now = new Date().toISOString();
    const name = `${pod.metadata?.name}.${Date.now().toString(16)}${randomBytes(2).toString('hex')}`;
    try {
      await rest.json({
        method: 'POST',
        path: `/api/v1/namespaces/${pod.metadata?.namespace}/events`,
        body: {
          apiVersion: 'v1',
          kind: 'Event',
          metadata: { name, namespace: pod.metadata?.namespace },
          involvedObject: { apiVersion: 'v1', kind: 'Pod', name: pod.metadata?.name, namespace: pod.metadata?.namespace, uid: pod.metadata?.uid },
          reason,
          message,
          type,
          count: 1,
          firstTimestamp: now,
          lastTimestamp: now,
          source: { component: 'kubelet', host: node },
          reportingComponent: 'kubelet',
          reportingInstance: node,
        },
      });
      return name;
    } catch (err: unknown) {
      log.warn({ pod: keyOf(pod), reason, err: errorMessage(err) }, 'event not recorded');
      return undefined;
    }
  };

  /** The same Event once more: its `count` and `lastTimestamp` (`kubectl describe`: `(x3 over 70s)`). @returns false when it is gone */
  const eventAgain = async (pod: V1Pod, name: string, count: number): Promise<boolean> => {
    try {
      await rest.json({
        method: 'PATCH',
        path: `/api/v1/namespaces/${pod.metadata?.namespace}/events/${encodeURIComponent(name)}`,
        body: { count, lastTimestamp: new Date().toISOString() },
        contentType: 'application/merge-patch+json',
      });
      return true;
    } catch (err: unknown) {
      if (!isApiError(err, 404)) log.warn({ pod: keyOf(pod), event: name, err: errorMessage(err) }, 'event not counted');
      return false;
    }
  };

  /**
   * A CreatePod the node answered with an error (its microVM refused: a spec feosd does not take, no address
   * left, the network not set up, ...): as a kubelet's FailedCreatePodSandBox, a Warning Event naming the gRPC
   * code and the node's message, the containers waiting, and a new try after the back-off.
   */
  const createRefused = async (pod: V1Pod, w: PodWork, spec: string, err: unknown): Promise<void> => {
    const code = grpcCode(err) ?? 2;
    const details = err instanceof GrpcCallError ? err.details : errorMessage(err);
    const node = pod.spec?.nodeName ?? '';
    const c = w.create?.spec === spec ? w.create : { at: 0, backoffMs: firstBackoff, spec };
    const wait = c.backoffMs;
    c.at = Date.now() + wait;
    c.backoffMs = Math.min(wait * 2, MAX_BACKOFF_MS);
    w.create = c;
    const codeName = GRPC_CODE_NAMES[code] ?? String(code);
    // kubelet's reasons: InvalidImageName for a reference it cannot parse, CreateContainerConfigError for a
    // spec it cannot run, CreateContainerError for what the runtime could not do now.
    const reason = code === INVALID_ARGUMENT ? (/\bcontainers\[\d+\]\.image\b/.test(details) ? 'InvalidImageName' : 'CreateContainerConfigError') : 'CreateContainerError';
    w.waiting = { reason, message: `FeOS node ${node} refused the pod's microVM (CreatePod: ${codeName}: ${details}); trying again in ${Math.round(wait / 1000)}s` };
    log.warn({ pod: keyOf(pod), node, code: codeName, err: details, retryInMs: wait }, 'CreatePod refused; trying again after the back-off');
    const message = `Failed to create pod sandbox: rpc error: code = ${codeName} desc = ${details}`;
    if (c.event && c.event.message === message && (await eventAgain(pod, c.event.name, c.event.count + 1))) {
      c.event.count += 1;
      return;
    }
    const name = await event(pod, 'Warning', 'FailedCreatePodSandBox', message);
    c.event = name ? { name, message, count: 1 } : undefined;
  };

  /** The pull token of the pod's bring-up: read from its imagePullSecrets now, kept nowhere. */
  const pullToken = async (pod: V1Pod): Promise<string> => {
    const secrets: { type?: string; data?: Record<string, string> }[] = [];
    for (const ref of pod.spec?.imagePullSecrets ?? []) {
      if (!ref.name) continue;
      try {
        secrets.push(await rest.json({ method: 'GET', path: `/api/v1/namespaces/${pod.metadata?.namespace}/secrets/${encodeURIComponent(ref.name)}` }));
      } catch (err: unknown) {
        if (!isApiError(err, 404)) throw err;
        log.info({ pod: keyOf(pod), secret: ref.name }, 'an imagePullSecret is missing; pulling without it');
      }
    }
    return pullTokenOf(pod, secrets) ?? '';
  };

  const writeStatus = async (pod: V1Pod, w: PodWork, info: PodInfo | undefined): Promise<void> => {
    const node = nodes.get(pod.spec?.nodeName ?? '');
    const local: LocalState = { restartCount: w.restartCount, hostIP: internalIp(node), ...(w.waiting ? { waiting: w.waiting } : {}) };
    const status = podStatusOf(pod, info, local, new Date());
    // Compared without the times made anew: one write per change, not one per look.
    const text = JSON.stringify(comparable(status));
    if (text === w.written) return;
    try {
      await rest.json({
        method: 'PATCH',
        path: `/api/v1/namespaces/${pod.metadata?.namespace}/pods/${encodeURIComponent(pod.metadata?.name ?? '')}/status`,
        body: { metadata: { uid: pod.metadata?.uid }, status },
        contentType: 'application/merge-patch+json',
      });
      w.written = text;
    } catch (err: unknown) {
      if (!isApiError(err, 404, 409)) log.warn({ pod: keyOf(pod), err: errorMessage(err) }, 'status not written');
    }
  };

  const createPod = async (pod: V1Pod, w: PodWork, session: http2.ClientHttp2Session, np: NodePods, id: string): Promise<void> => {
    const node = pod.spec?.nodeName ?? '';
    let spec: ReturnType<typeof feosPodSpec>;
    try {
      spec = feosPodSpec(pod, node, clusterId);
    } catch (err: unknown) {
      w.refused = true;
      w.waiting = { reason: 'CreateContainerConfigError', message: errorMessage(err) };
      await event(pod, 'Warning', 'Failed', `Error: ${errorMessage(err)}`);
      return;
    }
    const token = await pullToken(pod);
    try {
      const r = await unary(session, PodService.method.createPod, { id, spec, pullToken: token }, { timeoutMs: 60_000 });
      if (r.pod) np.infos.set(r.pod.id, r.pod);
      w.sawPending = true;
      w.create = undefined;
      w.waiting = undefined;
      log.info({ pod: keyOf(pod), node, feosPod: id }, 'FeOS pod created');
      for (const c of pod.spec?.containers ?? []) await event(pod, 'Normal', 'Pulling', `Pulling image "${c.image}"`);
    } catch (err: unknown) {
      const code = grpcCode(err);
      if (code === ALREADY_EXISTS) return; // made meanwhile (another look): its events tell
      await createRefused(pod, w, containersOf(pod), err);
    }
  };

  const startAgain = async (pod: V1Pod, w: PodWork, session: http2.ClientHttp2Session, id: string): Promise<void> => {
    const token = await pullToken(pod);
    w.restartCount += 1;
    w.sawPending = true;
    w.startedEvents = false;
    w.restoredFrom = undefined;
    // No second StartPod until this one's outcome is in (the FeOS pod's next failure sets the next time).
    w.nextStartAt = Number.POSITIVE_INFINITY;
    for (const c of pod.spec?.containers ?? []) await event(pod, 'Normal', 'Pulling', `Pulling image "${c.image}"`);
    // Answers once RUNNING or FAILED; the pod's events say which meanwhile.
    unary(session, PodService.method.startPod, { id, pullToken: token }, { timeoutMs: 20 * 60_000 }).catch((err: unknown) => {
      log.info({ pod: keyOf(pod), err: errorMessage(err) }, 'StartPod ended with an error');
    });
  };

  /** Stops and deletes a FeOS pod: StopPod within `graceMs`, then DeletePod. @throws GrpcCallError but NOT_FOUND */
  const stopAndDelete = async (session: http2.ClientHttp2Session, id: string, graceMs: number): Promise<void> => {
    try {
      await unary(session, PodService.method.stopPod, { id }, { timeoutMs: Math.max(1000, graceMs) });
    } catch (err: unknown) {
      if (grpcCode(err) === NOT_FOUND) return;
      // A stop past the grace period: DeletePod removes the microVM anyway.
      log.info({ feosPod: id, err: errorMessage(err) }, 'StopPod did not finish within the grace period; deleting');
    }
    try {
      await unary(session, PodService.method.deletePod, { id }, { timeoutMs: 120_000 });
    } catch (err: unknown) {
      if (grpcCode(err) !== NOT_FOUND) throw err;
    }
  };

  const deletePod = async (pod: V1Pod, session: http2.ClientHttp2Session, info: PodInfo | undefined, id: string): Promise<void> => {
    const grace = pod.metadata?.deletionGracePeriodSeconds ?? pod.spec?.terminationGracePeriodSeconds ?? 30;
    if (info && (info.state === PodState.RUNNING || info.state === PodState.PENDING)) {
      for (const c of pod.spec?.containers ?? []) await event(pod, 'Normal', 'Killing', `Stopping container ${c.name}`);
    }
    await stopAndDelete(session, id, grace * 1000);
    log.info({ pod: keyOf(pod), feosPod: id }, 'FeOS pod deleted');
    try {
      await rest.json({
        method: 'DELETE',
        path: `/api/v1/namespaces/${pod.metadata?.namespace}/pods/${encodeURIComponent(pod.metadata?.name ?? '')}`,
        body: { apiVersion: 'v1', kind: 'DeleteOptions', gracePeriodSeconds: 0, preconditions: { uid: pod.metadata?.uid } },
      });
    } catch (err: unknown) {
      if (!isApiError(err, 404, 409)) throw err;
    }
    work.delete(pod.metadata?.uid ?? '');
  };

  /** A restore that failed: the Pod ends `Failed`, reason `RestoreError` (a move's controller rolls it back). */
  const restoreFailed = async (pod: V1Pod, w: PodWork, message: string): Promise<void> => {
    w.restoreFailed = true;
    log.warn({ pod: keyOf(pod), err: message }, 'the microVM did not restore');
    await event(pod, 'Warning', 'Failed', `Error: RestoreError: ${message}`);
    const finishedAt = new Date().toISOString();
    try {
      await rest.json({
        method: 'PATCH',
        path: `/api/v1/namespaces/${pod.metadata?.namespace}/pods/${encodeURIComponent(pod.metadata?.name ?? '')}/status`,
        body: {
          metadata: { uid: pod.metadata?.uid },
          status: {
            phase: 'Failed',
            reason: 'RestoreError',
            message,
            containerStatuses: (pod.spec?.containers ?? []).map((c) => ({
              name: c.name,
              image: c.image,
              imageID: '',
              ready: false,
              restartCount: 0,
              state: { terminated: { exitCode: 1, reason: 'RestoreError', message, finishedAt } },
            })),
          },
        },
        contentType: 'application/merge-patch+json',
      });
    } catch (err: unknown) {
      if (!isApiError(err, 404, 409)) log.warn({ pod: keyOf(pod), err: errorMessage(err) }, 'status not written');
    }
  };

  /** One look at one Pod bound to a FeOS node. */
  const look = async (pod: V1Pod, np: NodePods): Promise<void> => {
    const uid = pod.metadata?.uid ?? '';
    const id = feosPodIdOf(pod);
    const session = np.session;
    if (!id || !session || !np.listed) return;
    let w = work.get(uid);
    if (!w) {
      w = { busy: false, sawPending: false, startedEvents: false, restartCount: pod.status?.containerStatuses?.[0]?.restartCount ?? 0, nextStartAt: 0, backOffAt: 0, backoffMs: firstBackoff };
      work.set(uid, w);
    }
    if (w.busy) return;
    const info = np.infos.get(id);
    if (pod.metadata?.deletionTimestamp) {
      w.deleting ??= deletePod(pod, session, info, id).catch((err: unknown) => {
        log.warn({ pod: keyOf(pod), err: errorMessage(err) }, 'deletion not finished; trying again');
        if (w) w.deleting = undefined;
      });
      return;
    }
    const phase = pod.status?.phase;
    if (phase === 'Succeeded' || phase === 'Failed' || w.restoreFailed) return;
    w.busy = true;
    try {
      const now = Date.now();
      if (moves.wantsRestore(pod, info)) {
        const r = await moves.restore(pod, info, session);
        if ('failed' in r) {
          if (r.stale && pod.metadata?.annotations?.[ANNOTATIONS.restoreFrom] === undefined) {
            // A Pod started afresh (a failed restore's replacement) over the stale HIBERNATED record of a
            // pod another node restored: the record goes, and the next look creates the FeOS pod.
            log.info({ pod: keyOf(pod), feosPod: id, err: r.failed }, 'the node\'s HIBERNATED record is stale; deleting it to start the pod afresh');
            await stopAndDelete(session, id, 1000);
            np.infos.delete(id);
            return;
          }
          await restoreFailed(pod, w, r.failed);
          return;
        }
        if (r.pod) np.infos.set(r.pod.id, r.pod);
        w.sawPending = true;
        w.startedEvents = false;
        w.restoredFrom = r.from;
      } else if (!info) {
        // After a refusal, not before its back-off ends, unless the containers changed (`kubectl set image`).
        if (!w.refused && (!w.create || now >= w.create.at || w.create.spec !== containersOf(pod))) await createPod(pod, w, session, np, id);
      } else if (info.state === PodState.PENDING) {
        w.sawPending = true;
        if (w.waiting?.reason !== 'CreateContainerConfigError') w.waiting = undefined;
      } else if (info.state === PodState.RUNNING) {
        w.waiting = undefined;
        w.backoffMs = firstBackoff;
        if (w.sawPending && !w.startedEvents) {
          w.startedEvents = true;
          const restored = w.restoredFrom;
          w.restoredFrom = undefined;
          for (const c of pod.spec?.containers ?? []) {
            if (restored !== undefined) {
              // The container goes on from its snapshot (its image's layers came with it): not a new one.
              await event(pod, 'Normal', 'Pulled', `Container image "${c.image}" already present on machine`);
              await event(pod, 'Normal', 'Restored', `Restored container ${c.name} from ${restored}`);
              continue;
            }
            await event(pod, 'Normal', 'Pulled', `Successfully pulled image "${c.image}"`);
            await event(pod, 'Normal', 'Created', `Created container: ${c.name}`);
            await event(pod, 'Normal', 'Started', `Started container ${c.name}`);
          }
        }
      } else if (info.state === PodState.SUSPENDED && info.reason.startsWith(FENCED_REASON) && !moves.moveInFlight(pod)) {
        // Fenced by its node while the control plane could not hear from it (feosd --fence-after), and its
        // Pod is still bound here (not restored elsewhere): it runs on where it stopped.
        log.info({ pod: keyOf(pod), node: pod.spec?.nodeName, feosPod: id }, 'resuming a pod its node fenced; the Pod is still bound there');
        const r = await unary(session, PodService.method.resumePod, { id }, { timeoutMs: 300_000 });
        if (r.pod) np.infos.set(r.pod.id, r.pod);
        await event(pod, 'Normal', 'Resumed', `Resumed the microVM its node fenced while the control plane could not reach it (${info.reason})`);
      } else if (info.state === PodState.FAILED || info.state === PodState.STOPPED) {
        const pull = /^container ([^:]+): create: /.exec(info.reason);
        const policy = pod.spec?.restartPolicy ?? 'Always';
        const restart = pull !== null || policy === 'Always' || (policy === 'OnFailure' && info.state === PodState.FAILED);
        if (w.failedGeneration !== info.generation) {
          w.failedGeneration = info.generation;
          if (pull) {
            const image = pod.spec?.containers?.find((c) => c.name === pull[1])?.image ?? '';
            w.pullImage = image;
            w.waiting = { reason: 'ErrImagePull', message: info.reason };
            await event(pod, 'Warning', 'Failed', `Failed to pull image "${image}": ${info.reason}`);
            await event(pod, 'Warning', 'Failed', 'Error: ErrImagePull');
            w.backOffAt = now + Math.min(5000, w.backoffMs / 2);
          } else if (restart) {
            w.waiting = { reason: 'CrashLoopBackOff', message: `back-off ${Math.round(w.backoffMs / 1000)}s restarting the failed microVM: ${info.reason}` };
            await event(pod, 'Warning', info.state === PodState.FAILED ? 'Failed' : 'BackOff', info.state === PodState.FAILED ? `Error: ${info.reason}` : `Back-off restarting the stopped microVM (${info.reason})`);
          } else w.waiting = undefined;
          w.nextStartAt = now + w.backoffMs;
        }
        if (pull && w.waiting?.reason === 'ErrImagePull' && now >= w.backOffAt) {
          w.waiting = { reason: 'ImagePullBackOff', message: `Back-off pulling image "${w.pullImage}"` };
          await event(pod, 'Normal', 'BackOff', `Back-off pulling image "${w.pullImage}"`);
        }
        if (restart && now >= w.nextStartAt) {
          w.backoffMs = Math.min(w.backoffMs * 2, 300_000);
          await startAgain(pod, w, session, id);
        }
      }
      await writeStatus(pod, w, np.infos.get(id));
    } catch (err: unknown) {
      log.warn({ pod: keyOf(pod), err: errorMessage(err) }, 'look failed; trying again');
    } finally {
      w.busy = false;
    }
  };

  /**
   * FeOS pods this cluster made whose Pod is gone: stopped and deleted. Read from the node's watched pods,
   * or, while none of its Pods is there (nothing watched), from its last report.
   */
  const sweepOrphans = (node: string, np: NodePods, bound: Map<string, V1Pod>, moving: ReadonlySet<string>): void => {
    if (!pods.synced) return;
    const known = np.listed ? [...np.infos.values()] : np.reported;
    const session = o.connection(node);
    if (!known || !session) return;
    for (const info of known) {
      if (info.spec?.metadata[META.cluster] !== clusterId || bound.has(info.id) || orphans.has(info.id)) continue;
      // The source's HIBERNATED record of a pod being moved: deleting it would take its checkpoint from the
      // store before the target's restore claims it. It goes once the moved Pod runs without the annotation.
      if (moving.has(info.id)) continue;
      orphans.add(info.id);
      log.info({ node, feosPod: info.id, pod: `${info.spec.metadata[META.namespace]}/${info.spec.metadata[META.name]}` }, 'the Pod of a FeOS pod this cluster made is gone; deleting the FeOS pod');
      stopAndDelete(session, info.id, 30_000)
        .then(() => np.infos.delete(info.id))
        .catch((err: unknown) => log.warn({ node, feosPod: info.id, err: errorMessage(err) }, 'orphan not deleted; trying again'))
        .finally(() => orphans.delete(info.id));
    }
  };

  const lookAll = (): void => {
    if (stopped || !pods.synced || !nodes.synced || !moves.checkpoints.synced) return;
    const byNode = new Map<string, Map<string, V1Pod>>();
    const moving = new Set<string>();
    for (const p of pods.list()) {
      const n = p.spec?.nodeName;
      if (!n || !nodes.get(n)) continue;
      const id = feosPodIdOf(p);
      if (!id) continue;
      // A pod being moved is bound to a FeOS node throughout (the source, then the target).
      if (p.metadata?.annotations?.[ANNOTATIONS.restoreFrom] !== undefined || moves.moveInFlight(p)) moving.add(id);
      const m = byNode.get(n) ?? new Map<string, V1Pod>();
      byNode.set(n, m);
      m.set(id, p);
    }
    for (const node of nodes.list()) {
      const name = node.metadata?.name ?? '';
      const np = nodePods.get(name) ?? new NodePods();
      nodePods.set(name, np);
      const bound = byNode.get(name) ?? new Map<string, V1Pod>();
      // The node's pods are watched while Pods are bound to it; its reports show the rest.
      if (bound.size > 0) np.ensure(o.connection(name), log.child({ node: name }), schedule);
      else np.stop();
      for (const p of bound.values()) void look(p, np);
      sweepOrphans(name, np, bound, moving);
    }
    for (const [name, np] of nodePods) {
      if (!nodes.get(name)) {
        np.stop();
        nodePods.delete(name);
      }
    }
  };
  let scheduled = false;
  function schedule(): void {
    if (scheduled || stopped) return;
    scheduled = true;
    setImmediate(() => {
      scheduled = false;
      lookAll();
    });
  }
  pods.on((verb, p) => {
    if (verb === 'delete') work.delete(p.metadata?.uid ?? '');
    if (p.spec?.nodeName && nodes.get(p.spec.nodeName)) schedule();
  });
  nodes.on(() => schedule());
  await nodes.start();
  await pods.start();
  await moves.start();
  const timer = setInterval(lookAll, o.resyncMs ?? 1000);
  timer.unref();
  schedule();
  log.info({ clusterId }, 'FeOS kubelet started');
  return {
    report(node, reported, stale) {
      if (stopped || stale || !nodes.get(node)) return;
      const np = nodePods.get(node) ?? new NodePods();
      nodePods.set(node, np);
      np.reported = reported;
    },
    async stop() {
      stopped = true;
      clearInterval(timer);
      for (const np of nodePods.values()) np.stop();
      await moves.stop();
      await pods.stop();
      await nodes.stop();
      rest.close();
    },
  };
}

/** What a refused CreatePod depends on in a Pod's spec that can change (its containers' images): a change is tried at once. */
function containersOf(pod: V1Pod): string {
  return JSON.stringify(pod.spec?.containers ?? []);
}

/** A status without the fields the comparison skips (times that are made anew). */
function comparable(s: unknown): unknown {
  return JSON.parse(JSON.stringify(s ?? {}, (k, v) => (k === 'lastTransitionTime' || k === 'lastProbeTime' || k === 'finishedAt' || k === 'startTime' ? undefined : v)));
}
