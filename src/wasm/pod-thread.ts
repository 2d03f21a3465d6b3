/**
 * The pod threads of the main thread: which thread a pod runs on, the port it talks on, and what
 * happens to a thread's pods when the thread ends.
 *
 * - One pod a thread (`podsPerThread` 1, the default): a pod takes a thread of its own, booted
 *   ahead of need (two spares are kept warm: a thread takes tens of ms to boot, and a pod's start, so a
 *   move's freeze-to-running time, should not wait for it, nor a second start right behind the first,
 *   such as a restore next to a pod started a moment before); its end terminates the thread.
 * - Dense pods (`podsPerThread` N > 1, see {@link configurePodThreads}): a request pod joins the
 *   fullest shared thread that has room for it (at most N pods), or takes the spare when every thread
 *   is full; an app pod always takes a thread of its own. A pod's end detaches its context; an empty
 *   shared thread is ended. A pod whose code runs past its call deadline can only be stopped with its
 *   thread: the thread's other pods then end with reason `Error` and a message naming it. While a
 *   detached pod's code still runs on a shared thread, no new pod joins it (a pod restarted at once
 *   would otherwise be stopped with it).
 */
import { MessageChannel, type MessagePort, Worker } from 'node:worker_threads';
import { errorMessage } from './errors.ts';
import { onPodThreadsChange, podThreadSettings } from './pod-threads-config.ts';
import type { FromThread, FromWorker, ToThread, ToWorker, WorkerInit } from './protocol.ts';
import { PodUsage } from './pod-usage.ts';
import { nowAbsMs, ThreadStatus } from './thread-status.ts';

const WORKER_URL = new URL(import.meta.url.endsWith('.ts') ? './worker.ts' : './worker.js', import.meta.url);

/** Spare threads kept booted (each some 16 MiB of RSS while idle). */
const SPARE = 2;

/**
 * How often, in ms, a shared thread closed to new pods (a detached pod's code still runs on it)
 * looks whether that run has returned, so that it takes pods again.
 */
const REOPEN_CHECK_MS = 50;

/**
 * V8 heap limits of a pod thread: a pod's own state is its linear memory (outside the JS heap), so
 * the JS heap stays small; a small young generation keeps an idle pod's RSS down. A shared thread
 * holds N instances (their exports, tables and host state), so its old generation grows with N.
 */
function resourceLimits(podsPerThread: number): { maxYoungGenerationSizeMb: number; maxOldGenerationSizeMb: number } {
  return { maxYoungGenerationSizeMb: 4, maxOldGenerationSizeMb: podsPerThread === 1 ? 256 : Math.min(4096, 256 + 2 * podsPerThread) };
}

/** Who a pod is, for the messages that name it. */
export interface PodLabel {
  namespace: string;
  podName: string;
  containerName: string;
}

/** How the thread under a pod reports to it. */
export interface PodLinkHandlers {
  /** A message from the pod's context. */
  onMessage(m: FromWorker): void;
  /**
   * The thread ended under the pod (not by the pod's own detach): `message` says why ("the pod's
   * worker failed: ...", or on a shared thread "the shared thread was stopped: pod ns/name ...").
   * `beforeStart` is the message to use when the pod had not started yet.
   */
  onThreadEnd(end: { message: string; beforeStart: string }): void;
}

/** A pod's connection to its thread (see {@link attachPod}). */
export interface PodLink {
  /** True on a shared thread (dense pods). */
  readonly shared: boolean;
  /** Sends to the pod's context; nothing once detached. */
  post(m: ToWorker, transfer?: ArrayBuffer[]): void;
  /**
   * When the pod's own code began its current run on the thread, in ms on `performance.now()`'s
   * clock; undefined when none of its code runs now (a call of it may be queued behind a co-tenant's).
   */
  runningSince(): number | undefined;
  /**
   * The pod has ended: frees its context on the thread (its own thread is terminated). On a shared
   * thread, when the pod's code still runs, it gets until `deadlineMs` after that run began to
   * return; if it is still in that run then, the thread is stopped, and its other pods end with a
   * message naming this pod and `what` (e.g. "ran past its call deadline (call k32_handle still
   * running after 10000 ms)").
   * @returns resolves when a thread of its own has ended (at once on a shared thread)
   */
  detach(deadlineMs: number, what: string): Promise<void>;
  /**
   * What the pod has used: on a thread of its own, the thread's CPU time since the pod joined it
   * (`Worker.cpuUsage()`, user + system); on a shared thread, the time its own code has run (its
   * co-tenants' runs are theirs); and its linear memory's length after its last run.
   */
  usage(): Promise<PodThreadUsage>;
}

/** A pod's use of its thread (see {@link PodLink.usage}). */
export interface PodThreadUsage {
  /** Nanoseconds of CPU the pod has taken on its thread. */
  cpuNs: number;
  /** Bytes of its linear memory. */
  memoryBytes: number;
}

/** The CPU time a worker has taken so far, ns (undefined once it has ended). */
async function workerCpuNs(w: Worker): Promise<number | undefined> {
  try {
    const u = await w.cpuUsage();
    return (u.user + u.system) * 1000;
  } catch {
    return undefined;
  }
}

interface Tenant {
  readonly slot: number;
  readonly label: PodLabel;
  readonly port: MessagePort;
  readonly handlers: PodLinkHandlers;
  /** Set to 1 when the pod ends here (see ToThread's attach). */
  readonly gone: Int32Array;
}

/** One pod thread, dedicated or shared. */
class PodThread {
  readonly worker: Worker;
  readonly status = new ThreadStatus();
  readonly booted: Promise<void>;
  /** Most pods on it: 0 while spare, 1 for a thread of one pod, N when shared. */
  capacity = 0;
  /** The setting it was booted for (its heap limits follow it). */
  readonly bootedFor: number;
  /** Slots ever given, so that a new pod never meets an old one's status. */
  #nextSlot = 1;
  readonly tenants = new Map<number, Tenant>();
  /** Slots detached whose code still runs, each watched until its deadline. */
  readonly #watches = new Set<NodeJS.Timeout>();
  #ended = false;
  /** True while a detached pod's code still runs on it: no new pod joins it (see {@link acceptsPods}). */
  #closed = false;
  /** Resolves once the thread has been terminated. */
  #terminated: Promise<void> = Promise.resolve();

  constructor(podsPerThread: number) {
    this.bootedFor = podsPerThread;
    const w = new Worker(WORKER_URL, { resourceLimits: resourceLimits(podsPerThread), workerData: { status: this.status.buffer } });
    this.worker = w;
    w.unref();
    this.booted = new Promise<void>((resolve) => {
      const onMessage = (m: FromThread): void => {
        if (m.op !== 'booted') return;
        w.off('message', onMessage);
        resolve();
      };
      w.on('message', onMessage);
      w.once('exit', () => resolve());
    });
    let failure: string | undefined;
    w.on('error', (err) => {
      failure ??= errorMessage(err);
    });
    w.once('exit', (code) => {
      const shared = this.capacity > 1;
      const message = failure !== undefined
        ? `the pod's ${shared ? 'shared thread' : 'worker'} failed: ${failure}`
        : `the pod's ${shared ? 'shared thread' : 'worker'} exited with code ${code}`;
      this.#end({ message, beforeStart: failure !== undefined ? message : `${message} before the pod started` });
    });
  }

  get shared(): boolean {
    return this.capacity > 1;
  }

  get ended(): boolean {
    return this.#ended;
  }

  /** True when a new pod may join it: not ended, and no detached pod's code still runs on it. */
  get acceptsPods(): boolean {
    return !this.#ended && !this.#closed && this.tenants.size < this.capacity;
  }

  /** Attaches a pod: a fresh channel, its far end transferred to the thread with the pod's init. */
  attach(init: WorkerInit, label: PodLabel, handlers: PodLinkHandlers): PodLink {
    const slot = this.#nextSlot++;
    const { port1, port2 } = new MessageChannel();
    port1.on('message', (m: FromWorker) => handlers.onMessage(m));
    // The thread, referenced while it holds pods, keeps the process alive; the ports need not.
    port1.unref();
    const gone = new Int32Array(new SharedArrayBuffer(4));
    const usage = new PodUsage();
    const tenant: Tenant = { slot, label, port: port1, handlers, gone };
    this.tenants.set(slot, tenant);
    this.worker.ref();
    // The thread's CPU before the pod (its boot and warm-up while it waited as a spare) is not the pod's.
    const baseline = this.shared ? Promise.resolve(0) : workerCpuNs(this.worker).then((n) => n ?? 0);
    this.worker.postMessage({ op: 'attach', slot, port: port2, init, gone: gone.buffer as SharedArrayBuffer, usage: usage.buffer } satisfies ToThread, [port2]);
    let detached = false;
    let lastCpuNs = 0;
    return {
      shared: this.shared,
      post: (m, transfer = []) => {
        if (!detached) port1.postMessage(m, transfer);
      },
      runningSince: () => {
        const r = this.status.read();
        return r && r.slot === slot ? r.sinceAbsMs - performance.timeOrigin : undefined;
      },
      usage: async () => {
        const own = usage.read();
        if (this.shared) return { cpuNs: own.runNs, memoryBytes: own.memoryBytes };
        const [now, base] = await Promise.all([this.#ended ? Promise.resolve(undefined) : workerCpuNs(this.worker), baseline]);
        // Once the thread has ended its last figure stands (a counter never goes back).
        if (now !== undefined) lastCpuNs = Math.max(lastCpuNs, now - base);
        return { cpuNs: lastCpuNs, memoryBytes: own.memoryBytes };
      },
      detach: (deadlineMs, what) => {
        if (detached) return Promise.resolve();
        detached = true;
        return this.#detach(tenant, deadlineMs, what);
      },
    };
  }

  #detach(tenant: Tenant, deadlineMs: number, what: string): Promise<void> {
    // First: from now on none of its code starts (a call or start step already queued on its port included).
    Atomics.store(tenant.gone, 0, 1);
    this.tenants.delete(tenant.slot);
    tenant.port.removeAllListeners('message');
    tenant.port.close();
    if (this.#ended) return this.#terminated;
    if (!this.shared || this.tenants.size === 0) {
      // Its own thread, or the last pod of a shared one: the thread goes (a running call with it).
      this.#end(undefined);
      return this.#terminated;
    }
    this.worker.postMessage({ op: 'detach', slot: tenant.slot } satisfies ToThread);
    const run = this.status.read();
    if (!run || run.slot !== tenant.slot) return Promise.resolve();
    // Its code still runs: the context is freed once it returns. If it has not returned by its
    // deadline, it never gives the thread back: stop the thread. Until then no new pod joins the
    // thread: a pod started now (the runaway pod restarted at once by its restart policy among
    // them) would be stopped with it and end with the co-tenants' message.
    this.#closed = true;
    const deadline = run.sinceAbsMs + deadlineMs;
    const watch = (): void => {
      this.#watches.delete(timer);
      const now = this.status.read();
      if (now && now.slot === run.slot && now.seq === run.seq) {
        const left = deadline - nowAbsMs();
        if (left <= 0) {
          this.stop(tenant.label, what);
          return;
        }
        // Looked at again soon, so that a run that returns early opens the thread again soon.
        timer = setTimeout(watch, Math.min(left, REOPEN_CHECK_MS));
        timer.unref();
        this.#watches.add(timer);
        return;
      }
      if (this.#watches.size === 0) this.#closed = false;
    };
    let timer = setTimeout(watch, Math.min(Math.max(0, deadline - nowAbsMs()), REOPEN_CHECK_MS));
    timer.unref();
    this.#watches.add(timer);
    return Promise.resolve();
  }

  /**
   * Stops the thread because of a runaway pod: each other pod on it ends at once with a message
   * naming that pod (so that the kubelet restarts them by their restart policy).
   */
  stop(runaway: PodLabel, what: string): void {
    if (this.#ended) return;
    const message = `the shared thread was stopped: pod ${runaway.namespace}/${runaway.podName} (container ${runaway.containerName}) ${what}, and a pod's code can only be stopped with its thread`;
    this.#end({ message, beforeStart: message });
  }

  #end(end: { message: string; beforeStart: string } | undefined): void {
    if (this.#ended) return;
    this.#ended = true;
    for (const t of this.#watches) clearTimeout(t);
    this.#watches.clear();
    removeThread(this);
    const left = [...this.tenants.values()];
    this.tenants.clear();
    this.#terminated = this.worker.terminate().then(() => {}, () => {});
    for (const t of left) {
      t.port.removeAllListeners('message');
      t.port.close();
      t.handlers.onThreadEnd(end ?? { message: 'the pod\'s thread ended', beforeStart: 'the pod\'s thread ended before the pod started' });
    }
  }
}

/** Booted threads that hold no pod yet. */
const spare: PodThread[] = [];
/** Shared threads that hold pods. */
const shared = new Set<PodThread>();
let refilling = false;

function removeThread(t: PodThread): void {
  const i = spare.indexOf(t);
  if (i >= 0) spare.splice(i, 1);
  shared.delete(t);
}

function takeSpare(): PodThread {
  return spare.shift() ?? new PodThread(podThreadSettings().podsPerThread);
}

// A spare booted for another setting has other heap limits: boot it again for the new one.
onPodThreadsChange((n) => {
  const stale = spare.filter((t) => t.bootedFor !== n);
  if (stale.length === 0) return;
  for (const t of stale) {
    removeThread(t);
    void t.worker.terminate();
  }
  replenishWorkerPool();
});

/**
 * Attaches a pod to a thread by the current {@link configurePodThreads} setting: a thread of its
 * own for one pod a thread and for app pods (`dedicated`), else the fullest shared thread with room,
 * else the spare. Call {@link replenishWorkerPool} once the pod has started.
 */
export function attachPod(init: WorkerInit, label: PodLabel, handlers: PodLinkHandlers): PodLink {
  const n = podThreadSettings().podsPerThread;
  if (n === 1 || init.kind === 'app') {
    const t = takeSpare();
    t.capacity = 1;
    return t.attach(init, label, handlers);
  }
  let best: PodThread | undefined;
  for (const t of shared) {
    if (t.acceptsPods && (!best || t.tenants.size > best.tenants.size)) best = t;
  }
  if (!best) {
    best = takeSpare();
    best.capacity = n;
    shared.add(best);
  }
  return best.attach(init, label, handlers);
}

/**
 * Boots spare threads up to the pool's size, on the next turn of the event loop. The runtime calls
 * it once a pod has started, so that booting the next thread does not compete with that start.
 */
export function replenishWorkerPool(): void {
  if (refilling) return;
  refilling = true;
  setImmediate(() => {
    refilling = false;
    while (spare.length < SPARE) spare.push(new PodThread(podThreadSettings().podsPerThread));
  });
}

/**
 * Boots the spare threads now and resolves once they wait for their pods, so that the next
 * {@link PodInstance.start} does not wait for a thread to boot. A node calls it at startup;
 * `loadModule` calls it without waiting.
 */
export async function warmWorkerPool(): Promise<void> {
  while (spare.length < SPARE) spare.push(new PodThread(podThreadSettings().podsPerThread));
  await Promise.all(spare.map((t) => t.booted));
}

/** Stops the spare threads (tests and tools that want a quiet exit; they are unreferenced anyway). */
export async function drainWorkerPool(): Promise<void> {
  const all = spare.splice(0);
  await Promise.all(all.map((t) => t.worker.terminate()));
}

/** The pod threads now: how many pods each holds (for benchmarks, tests and a node's metrics). */
export function podThreadCounts(): { spare: number; shared: number[] } {
  return { spare: spare.length, shared: [...shared].map((t) => t.tenants.size) };
}
