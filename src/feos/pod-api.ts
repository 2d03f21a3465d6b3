/**
 * feos.pod.v1.PodService as feosd serves it (seed 000, "A pod", "Stopping"): each handler parses its
 * request and dispatches one pod action or read; a call that changes a pod while feosd stops is refused
 * with UNAVAILABLE "feosd stops", and a stream that feosd's stop cuts ends with that status.
 */
import type * as grpc from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import { PodService as PodServiceDesc, PodEventSchema, type PodEvent } from './gen/feos/pod/v1/pod_pb.js';
import { addService, FeosError } from './api/index.ts';
import { execInPod, podLogs, portForward, type PodAction, type PodService } from './pods/index.ts';

/** The status of the calls that a stopping feosd refuses or ends (seed 000, "Stopping"). */
export function feosdStops(): FeosError {
  return new FeosError('UNAVAILABLE', 'feosd stops');
}

/** Aborts when a streaming call's caller goes away, or when `also` aborts (feosd stops). */
function callSignal(call: { once(event: 'cancelled' | 'close', fn: () => void): unknown }, also: AbortSignal): AbortSignal {
  const ac = new AbortController();
  call.once('cancelled', () => ac.abort());
  call.once('close', () => ac.abort());
  return AbortSignal.any([ac.signal, also]);
}

/** What the pod API needs of feosd. */
export interface PodApiOptions {
  pods: PodService;
  /** Aborted at once when feosd stops: calls that change a pod are refused, watches end. */
  stopping: AbortSignal;
  /** Aborted when the calls' grace is over: the streams still running end. */
  cancelling: AbortSignal;
  /** Called with each failed call's method and error (for the log). */
  onError: (method: string, err: unknown) => void;
}

/** Adds PodService to `server`. */
export function addPodService(server: grpc.Server, o: PodApiOptions): void {
  const { pods, stopping, cancelling } = o;
  const act = (id: string, a: PodAction) => {
    if (stopping.aborted) throw feosdStops();
    return pods.act(id, a);
  };
  /** Runs a stream's handler; one that ends because feosd stops ends with UNAVAILABLE. */
  const streaming = async (run: (signal: AbortSignal) => Promise<void>, call: Parameters<typeof callSignal>[0]) => {
    try {
      await run(callSignal(call, cancelling));
    } catch (err: unknown) {
      if (cancelling.aborted) throw feosdStops();
      throw err;
    }
    if (cancelling.aborted) throw feosdStops();
  };
  addService(
    server,
    PodServiceDesc,
    {
      // The pull token goes to the pod layer's memory only (seed "Pull tokens").
      createPod: async (req) => ({ pod: await act(req.id, { kind: 'create', spec: req.spec!, pullToken: req.pullToken, imageLayers: req.imageLayers }) }),
      getPod: async (req) => ({ pod: await pods.getWithGuest(req.id) }),
      listPods: async () => ({ pods: pods.list() }),
      startPod: async (req) => ({ pod: await act(req.id, { kind: 'start', pullToken: req.pullToken }) }),
      stopPod: async (req) => ({ pod: await act(req.id, { kind: 'stop' }) }),
      deletePod: async (req) => {
        await act(req.id, { kind: 'delete' });
        return {};
      },
      suspendPod: async (req) => ({ pod: await act(req.id, { kind: 'suspend' }) }),
      resumePod: async (req) => ({ pod: await act(req.id, { kind: 'resume', diskOnly: req.diskOnly }) }),
      hibernatePod: async (req) => ({ pod: await act(req.id, { kind: 'hibernate', noAbandon: req.noAbandon, keepRunning: req.keepRunning }) }),
      restorePod: async (req) => ({ pod: await act(req.id, { kind: 'restore', checkpoint: req.checkpoint || undefined, diskOnly: req.diskOnly }) }),
      execPod: async (reqs, send, call) => {
        const it = reqs[Symbol.asyncIterator]();
        const first = await it.next();
        if (first.done || first.value.request.case !== 'start') throw new FeosError('INVALID_ARGUMENT', 'exec: the first request must be start');
        const start = first.value.request.value;
        await streaming((signal) => execInPod(pods, start, { [Symbol.asyncIterator]: () => it }, send, signal), call);
      },
      podLogs: async (req, send, call) => streaming((signal) => podLogs(pods, req, send, signal), call),
      portForwardPod: async (reqs, send, call) => {
        const it = reqs[Symbol.asyncIterator]();
        const first = await it.next();
        if (first.done || first.value.request.case !== 'start') throw new FeosError('INVALID_ARGUMENT', 'port forward: the first request must be start');
        const start = first.value.request.value;
        await streaming((signal) => portForward(pods, start, { [Symbol.asyncIterator]: () => it }, send, signal), call);
      },
      watchPodEvents: async (req, send, call) => {
        const only = req.podId ? pods.get(req.podId).id : '';
        const queue: PodEvent[] = [];
        let wake: (() => void) | undefined;
        const listener = (ev: PodEvent) => {
          if (only && ev.podId !== only) return;
          queue.push(ev);
          wake?.();
        };
        pods.on('event', listener);
        try {
          for (const p of only ? [pods.get(only)] : pods.list()) {
            send(create(PodEventSchema, { podId: p.id, pod: p, initial: true }));
          }
          // A watch has no end of its own: it ends when its caller goes away or at once when feosd stops.
          const ended = new Promise<void>((r) => {
            call.once('cancelled', r);
            call.once('close', r);
            stopping.addEventListener('abort', () => r(), { once: true });
          });
          let done = false;
          void ended.then(() => {
            done = true;
            wake?.();
          });
          while (!done) {
            while (queue.length > 0) send(queue.shift()!);
            await new Promise<void>((r) => {
              wake = r;
            });
            wake = undefined;
          }
          if (stopping.aborted) throw feosdStops();
        } finally {
          pods.off('event', listener);
        }
      },
    },
    o.onError,
  );
}
