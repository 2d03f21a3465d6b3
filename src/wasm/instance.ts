/** One pod's container running in its own worker thread (pod-abi.md; seed "What moves", "Kubelet endpoints"). */
import { EventEmitter } from 'node:events';
import type { LogEntry, LogReadOptions, PodExit, PodModule, PodSnapshot, PodStartOptions, RunningCall } from './types.ts';

/**
 * A running container. Events: `exit` (PodExit), `overdue` ({ name, ms }), `ready` / `frozen` / `thawed`.
 */
export class PodInstance extends EventEmitter {
  readonly module: PodModule;
  readonly namespace: string;
  readonly podName: string;
  readonly containerName: string;
  /** Resolves with the exit report when the container ends. */
  readonly exited: Promise<PodExit>;
  private constructor(opts: PodStartOptions) {
    super();
    this.module = opts.module;
    this.namespace = opts.namespace;
    this.podName = opts.podName;
    this.containerName = opts.containerName;
    this.exited = new Promise(() => {});
  }
  /** Starts a container (k32_init, or restore + k32_restored). @throws PodStartError */
  static async start(opts: PodStartOptions): Promise<PodInstance> {
    return new PodInstance(opts);
  }
  /** Sends one raw HTTP/1.1 request to k32_handle; resolves with the raw response. @throws PodCallError */
  async handle(_request: Uint8Array, _signal?: AbortSignal): Promise<Uint8Array> {
    throw new Error('not implemented');
  }
  /** Delivers an event (held while frozen, at most 8). */
  event(_topic: string, _payload: Uint8Array): void {}
  /** Freezes once the current call returns. @throws PodStateError Timeout */
  async freeze(_timeoutMs = 10_000): Promise<void> {}
  /** Thaws; held events first. @throws PodStateError NotFrozen */
  async thaw(): Promise<void> {}
  get frozen(): boolean {
    return false;
  }
  /** The exit report once ended, else undefined. */
  get exit(): PodExit | undefined {
    return undefined;
  }
  /** The call running now, if any. */
  get runningCall(): RunningCall | undefined {
    return undefined;
  }
  /** Held events dropped while frozen (beyond 8). */
  get droppedEvents(): number {
    return 0;
  }
  /** The node-side blockers, the seed's exact texts. */
  blockers(): string[] {
    return [];
  }
  /** K32S snapshot of a frozen pod. @throws PodStateError */
  async snapshot(_opts: { digest?: boolean } = {}): Promise<PodSnapshot> {
    throw new Error('not implemented');
  }
  /** Ends the container (reason Terminated unless it already ended). */
  async terminate(): Promise<PodExit> {
    throw new Error('not implemented');
  }
  /** Reads the log ring. */
  logs(_opts: LogReadOptions = {}): AsyncIterable<LogEntry> {
    return (async function* () {})();
  }
}
