/**
 * A FeOS pod's streams over its node's connection (docs/feos/fleet.md, "Logs, exec and port-forward";
 * issue 18): PodLogs, ExecPod and PortForwardPod of feosd's PodService called over the newest node
 * connection of the node (./node-client.ts). The API server serves `pods/log`, `pods/exec` and
 * `pods/portforward` of Pods bound to FeOS nodes with these (its `setFeosPodStreams`); they fail
 * with a {@link GrpcCallError}: UNAVAILABLE when the node holds no connection, else the node's status.
 */
import type http2 from 'node:http2';
import { PodService } from '../feos/gen/feos/pod/v1/pod_pb.js';
import { bidiStream, GrpcCallError, GrpcCode, serverStream } from './node-client.ts';

/** What a log call asks (PodLogsRequest). */
export interface FeosLogRequest {
  podId: string;
  /** The FeOS container's name; '' = the pod's first. */
  container: string;
  follow: boolean;
  /** The last lines only; 0 = all. */
  tailLines: number;
}

/** What an exec starts (ExecPodStart). */
export interface FeosExecRequest {
  podId: string;
  container: string;
  command: string[];
  tty: boolean;
  stdin: boolean;
}

/** An exec in flight. */
export interface FeosExec {
  /** Bytes for the command's stdin. */
  stdin(data: Uint8Array): void;
  /** Ends its stdin. */
  closeStdin(): void;
  /** Gives the command up (the call is cancelled). */
  cancel(): void;
  /** The command's exit code once it ended (its ExecPodResponse exit_code; -1 when the call ended OK without one). @throws GrpcCallError */
  done: Promise<number>;
}

/** A port-forward stream in flight. */
export interface FeosForward {
  write(data: Uint8Array): void;
  /** No more bytes toward the pod (half-close); what the pod sends goes on. */
  end(): void;
  cancel(): void;
  /** Resolves when the pod's side ended. @throws GrpcCallError */
  done: Promise<void>;
}

/** The streams of FeOS pods, by node name (the shape of the API server's `FeosPodStreams`). */
export interface FleetPodStreams {
  logs(node: string, req: FeosLogRequest, onData: (data: Uint8Array) => void, signal: AbortSignal): Promise<void>;
  exec(node: string, req: FeosExecRequest, onOutput: (stream: 'stdout' | 'stderr', data: Uint8Array) => void): FeosExec;
  portForward(node: string, podId: string, port: number, onData: (data: Uint8Array) => void): FeosForward;
}

/** The streams over `connection(node)`, the newest node connection of a node (FleetServer.nodeConnection). */
export function fleetPodStreams(connection: (node: string) => http2.ClientHttp2Session | undefined): FleetPodStreams {
  const session = (node: string) => {
    const s = connection(node);
    if (!s) throw new GrpcCallError(GrpcCode.UNAVAILABLE, `FeOS node "${node}" holds no node connection with this control plane (is its feosd running and joined?)`);
    return s;
  };
  return {
    async logs(node, req, onData, signal) {
      return serverStream(session(node), PodService.method.podLogs, req, (m) => onData(m.data), { signal });
    },
    exec(node, req, onOutput) {
      let exit = -1;
      const { promise: done, resolve, reject } = Promise.withResolvers<number>();
      // The exit code is the last answer: the command ended, whatever its stdin. The call is given up
      // then (a terminal's stdin stays open, and the node ends the call only once its requests end).
      const call = bidiStream(session(node), PodService.method.execPod, (m) => {
        if (m.response.case === 'stdout') onOutput('stdout', m.response.value);
        else if (m.response.case === 'stderr') onOutput('stderr', m.response.value);
        else if (m.response.case === 'exitCode') {
          exit = m.response.value;
          resolve(exit);
          queueMicrotask(() => call.cancel());
        }
      });
      call.done.then(
        () => resolve(exit),
        (err: unknown) => (exit >= 0 ? resolve(exit) : reject(err)),
      );
      call.write({ request: { case: 'start', value: req } });
      if (!req.stdin) call.end();
      let closed = !req.stdin;
      return {
        stdin: (data) => {
          if (!closed) call.write({ request: { case: 'stdin', value: data } });
        },
        closeStdin: () => {
          if (closed) return;
          closed = true;
          call.write({ request: { case: 'closeStdin', value: true } });
          call.end();
        },
        cancel: () => call.cancel(),
        done,
      };
    },
    portForward(node, podId, port, onData) {
      const call = bidiStream(session(node), PodService.method.portForwardPod, (m) => onData(m.data));
      call.write({ request: { case: 'start', value: { podId, port } } });
      return {
        write: (data) => call.write({ request: { case: 'data', value: data } }),
        end: () => call.end(),
        cancel: () => call.cancel(),
        done: call.done,
      };
    },
  };
}
