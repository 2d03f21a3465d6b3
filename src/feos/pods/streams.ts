/**
 * A RUNNING pod's streams through its guest (seed 000, "A pod": exec, logs, port forward; "The
 * guest": a call to the guest connects within 5 s, its handshake included, and then has no bound but
 * its caller's): each opens the guest's stream of the same name and relays messages both ways.
 */
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import {
  ContainerLogsRequestSchema,
  ContainerLogsResponseSchema,
  ExecRequestSchema,
  ExecResponseSchema,
  PortForwardRequestSchema,
  PortForwardResponseSchema,
} from '../gen/feos/guest/v1/guest_pb.js';
import type { ExecPodRequest, ExecPodResponse, ExecPodStart, PodLogsRequest, PortForwardPodRequest } from '../gen/feos/pod/v1/pod_pb.js';
import { asFeosError, type CodeName, codeName, FeosError, errorMessage } from '../api/index.ts';
import { GrpcError } from '../guest/index.ts';
import type { PodService } from './service.ts';
import { GUEST_CALL_MS } from './service.ts';

type Send<T> = (msg: T) => unknown;
type ExecOut = Partial<Pick<ExecPodResponse, 'response'>>;

/** The guest's error as the API's: its code kept, the pod named. */
function fromGuest(podId: string, err: unknown): FeosError {
  const known = asFeosError(err);
  if (known) return known;
  if (err instanceof GrpcError) return new FeosError(codeName(err.code) as CodeName, err.message, { cause: err });
  return new FeosError('UNAVAILABLE', `the guest of pod ${podId}: ${errorMessage(err)}`, { cause: err });
}

async function open(pods: PodService, podId: string, container: string, name: 'Exec' | 'ContainerLogs' | 'PortForward') {
  const g = pods.guestOfRunning(podId, container);
  try {
    return { call: await g.guest.stream(name, GUEST_CALL_MS), container: g.container };
  } catch (err: unknown) {
    throw new FeosError('UNAVAILABLE', `the guest of pod ${podId} did not answer within 5s: ${errorMessage(err)}`, { cause: err });
  }
}

/**
 * Runs a command in a container of a RUNNING pod (PodService.ExecPod).
 * @param start the first request's start (pod, container, command, tty, stdin)
 * @param rest the requests after it: stdin and its end
 * @param send each response: stdout, stderr, and last the exit code
 * @throws FeosError INVALID_ARGUMENT (no command), NOT_FOUND, FAILED_PRECONDITION, UNAVAILABLE
 */
export async function execInPod(pods: PodService, start: ExecPodStart, rest: AsyncIterable<ExecPodRequest>, send: Send<ExecOut>, signal: AbortSignal): Promise<void> {
  if (start.command.length === 0) throw new FeosError('INVALID_ARGUMENT', 'exec: empty command');
  const { call, container } = await open(pods, start.podId, start.container, 'Exec');
  const onAbort = () => call.cancel();
  signal.addEventListener('abort', onAbort, { once: true });
  call.send(
    toBinary(ExecRequestSchema, create(ExecRequestSchema, { request: { case: 'start', value: { container, command: start.command, tty: start.tty, stdin: start.stdin } } })),
  );
  // Read by hand: leaving a for-await early would return() the caller's stream, which ends the call.
  void (async () => {
    const it = rest[Symbol.asyncIterator]();
    try {
      for (;;) {
        const r = await it.next();
        if (r.done) break;
        const req = r.value.request;
        if (req.case === 'stdin') call.send(toBinary(ExecRequestSchema, create(ExecRequestSchema, { request: { case: 'stdin', value: req.value } })));
        else if (req.case === 'closeStdin') {
          call.send(toBinary(ExecRequestSchema, create(ExecRequestSchema, { request: { case: 'closeStdin', value: true } })));
          break;
        }
      }
    } catch {}
    call.end();
  })();
  try {
    for await (const m of call.messages) {
      const r = fromBinary(ExecResponseSchema, m);
      if (r.response.case) send({ response: r.response } as ExecOut);
    }
  } catch (err: unknown) {
    throw fromGuest(start.podId, err);
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}

/**
 * A container's log (PodService.PodLogs): the last lines, then with follow what it writes until it
 * ends or the caller goes away.
 * @throws FeosError NOT_FOUND, FAILED_PRECONDITION, UNAVAILABLE
 */
export async function podLogs(pods: PodService, req: PodLogsRequest, send: Send<{ data: Uint8Array }>, signal: AbortSignal): Promise<void> {
  const { call, container } = await open(pods, req.podId, req.container, 'ContainerLogs');
  const onAbort = () => call.cancel();
  signal.addEventListener('abort', onAbort, { once: true });
  call.send(toBinary(ContainerLogsRequestSchema, create(ContainerLogsRequestSchema, { container, follow: req.follow, tailLines: req.tailLines })));
  call.end();
  try {
    for await (const m of call.messages) send({ data: fromBinary(ContainerLogsResponseSchema, m).data });
  } catch (err: unknown) {
    if (signal.aborted) return;
    throw fromGuest(req.podId, err);
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}

/**
 * A TCP stream to a port on a RUNNING pod's loopback (PodService.PortForwardPod): the first request
 * names the pod and the port, then data both ways until either side ends.
 * @throws FeosError INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, UNAVAILABLE (nothing listens)
 */
export async function portForward(
  pods: PodService,
  start: { podId: string; port: number },
  rest: AsyncIterable<PortForwardPodRequest>,
  send: Send<{ data: Uint8Array }>,
  signal: AbortSignal,
): Promise<void> {
  if (start.port < 1 || start.port > 65535) throw new FeosError('INVALID_ARGUMENT', `port ${start.port}: want 1 to 65535`);
  const pod = pods.get(start.podId);
  // A port forward needs a RUNNING pod, not a container: any container's check will do when it has one.
  const { call } = await open(pods, pod.id, '', 'PortForward').catch(async (err: unknown) => {
    if (asFeosError(err)?.code === 'NOT_FOUND' && pod.spec!.containers.length === 0) {
      return { call: await pods.guest(pod.id).stream('PortForward', GUEST_CALL_MS), container: '' };
    }
    throw err;
  });
  const onAbort = () => call.cancel();
  signal.addEventListener('abort', onAbort, { once: true });
  call.send(toBinary(PortForwardRequestSchema, create(PortForwardRequestSchema, { request: { case: 'port', value: start.port } })));
  void (async () => {
    try {
      for await (const r of rest) {
        if (r.request.case === 'data') call.send(toBinary(PortForwardRequestSchema, create(PortForwardRequestSchema, { request: { case: 'data', value: r.request.value } })));
      }
    } catch {}
    call.end();
  })();
  try {
    for await (const m of call.messages) send({ data: fromBinary(PortForwardResponseSchema, m).data });
  } catch (err: unknown) {
    if (signal.aborted) return;
    throw fromGuest(start.podId, err);
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}
