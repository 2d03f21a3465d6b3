/**
 * Spare pod workers, started ahead of need. A worker thread takes tens of milliseconds to boot
 * (a V8 isolate, Node's bootstrap, the worker's modules); a pod's start, and so a move's
 * freeze-to-running time, should not wait for that. The pool keeps one booted worker waiting for
 * its `init` message, unreferenced so that it never keeps a process alive, and boots the next one
 * once the pod that took it has started.
 */
import { Worker } from 'node:worker_threads';

const WORKER_URL = new URL(import.meta.url.endsWith('.ts') ? './worker.ts' : './worker.js', import.meta.url);

/** Spare workers kept booted. */
const SPARE = 1;

/**
 * V8 heap limits of a pod's worker: a pod's own state is its linear memory (outside the JS heap), so
 * the worker's JS heap stays small; a small young generation keeps an idle pod's RSS down.
 */
const RESOURCE_LIMITS = { maxYoungGenerationSizeMb: 4, maxOldGenerationSizeMb: 256 } as const;

const spare: Worker[] = [];
/** Resolves when each spare worker has loaded its code and waits for its pod. */
const booted = new WeakMap<Worker, Promise<void>>();
let refilling = false;

function boot(): Worker {
  const w = new Worker(WORKER_URL, { resourceLimits: RESOURCE_LIMITS });
  w.unref();
  booted.set(w, new Promise<void>((resolve) => {
    const done = (): void => {
      w.off('message', onMessage);
      resolve();
    };
    const onMessage = (m: { op?: string }): void => {
      if (m.op === 'booted') done();
    };
    w.on('message', onMessage);
    w.once('exit', done);
  }));
  // A spare that dies before it is used is dropped.
  const onExit = (): void => {
    const i = spare.indexOf(w);
    if (i >= 0) spare.splice(i, 1);
  };
  w.once('exit', onExit);
  w.once('error', onExit);
  (w as Worker & { __k32OnExit?: () => void }).__k32OnExit = onExit;
  return w;
}

/**
 * Boots spare workers up to the pool's size, on the next turn of the event loop. The runtime calls
 * it once a pod has started, so that booting the next worker does not compete with that start.
 */
export function replenishWorkerPool(): void {
  if (refilling) return;
  refilling = true;
  setImmediate(() => {
    refilling = false;
    while (spare.length < SPARE) spare.push(boot());
  });
}

/**
 * A pod worker, booted (or booting) and referenced; send it `{ op: 'init', init }` first, and call
 * {@link replenishWorkerPool} once the pod has started.
 */
export function takeWorker(): Worker {
  const w = spare.shift() ?? boot();
  const onExit = (w as Worker & { __k32OnExit?: () => void }).__k32OnExit;
  if (onExit) {
    w.off('exit', onExit);
    w.off('error', onExit);
  }
  w.ref();
  return w;
}

/**
 * Boots the spare workers now and resolves once they wait for their pods, so that the next
 * {@link PodInstance.start} does not wait for a worker to boot. A node calls it at startup;
 * `loadModule` calls it without waiting.
 */
export async function warmWorkerPool(): Promise<void> {
  while (spare.length < SPARE) spare.push(boot());
  await Promise.all(spare.map((w) => booted.get(w)));
}

/** Stops the spare workers (tests and tools that want a quiet exit; they are unreferenced anyway). */
export async function drainWorkerPool(): Promise<void> {
  const all = spare.splice(0);
  await Promise.all(all.map((w) => w.terminate()));
}
