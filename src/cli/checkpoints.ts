/**
 * Checkpoints as kube32-cli creates and follows them: the kube32.io/v1 Checkpoint shape (seed
 * "Checkpoint objects and data"), creating a Save or Move, following its phase to the end, and finding
 * the Moved event that gives a move's time from the freeze (seed "Moves": "Moved — the replacement
 * runs. The message gives the time from the freeze").
 */
import { randomBytes } from 'node:crypto';
import type { KubeConfig } from '@kubernetes/client-node';
import type { CheckpointSpec, CheckpointStatus } from '../api/index.ts';
import { ApiError, apiJson, waitForObject } from './api-client.ts';
import { CliError } from './errors.ts';

/**
 * kube32.io/v1 Checkpoint as kube32-cli reads and writes it: the controllers' spec and status types
 * (type-only: nothing of the controllers is loaded), with the metadata the CLI always has.
 */
export interface Checkpoint {
  apiVersion: 'kube32.io/v1';
  kind: 'Checkpoint';
  metadata: {
    name: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    creationTimestamp?: string;
    labels?: Record<string, string>;
  };
  spec: CheckpointSpec;
  status?: CheckpointStatus;
}

/** A core/v1 Event, the fields read here. */
export interface CoreEvent {
  metadata: { name: string; creationTimestamp?: string };
  involvedObject: { kind?: string; name?: string; namespace?: string; uid?: string };
  reason?: string;
  message?: string;
  type?: string;
  firstTimestamp?: string;
  lastTimestamp?: string;
  eventTime?: string;
}

/** The path of the Checkpoint collection of `namespace`. */
export function checkpointsPath(namespace: string): string {
  return `/apis/kube32.io/v1/namespaces/${encodeURIComponent(namespace)}/checkpoints`;
}

/**
 * A Checkpoint name for `podName`: `<pod>-<kind>-<5 random letters and digits>`, cut so that it stays
 * a valid object name (253 characters at most).
 * @param kind `move` or `save`
 */
export function checkpointName(podName: string, kind: 'move' | 'save'): string {
  const alphabet = 'bcdfghjklmnpqrstvwxz2456789'; // kubectl's generateName alphabet: no vowels, no look-alikes
  const suffix = [...randomBytes(5)].map((b) => alphabet[b % alphabet.length]).join('');
  return `${podName.slice(0, 253 - kind.length - 7)}-${kind}-${suffix}`;
}

/** True once a Checkpoint has reached the end of its action: Saved for a Save, Completed for a Move, or Failed. */
export function isFinished(ckpt: Checkpoint | undefined): boolean {
  const phase = ckpt?.status?.phase;
  if (phase === 'Failed' || phase === 'Completed') return true;
  return phase === 'Saved' && (ckpt?.spec.action ?? 'Save') === 'Save';
}

/**
 * Follows a Checkpoint until it is finished, calling `onPhase` at each new phase.
 * @returns the finished Checkpoint
 * @throws CliError when it is deleted before it finishes, or when `signal` ends first (the message names
 *   the phase it was in)
 */
export async function followCheckpoint(
  kc: KubeConfig,
  namespace: string,
  name: string,
  signal: AbortSignal,
  onPhase: (ckpt: Checkpoint) => void = () => {},
): Promise<Checkpoint> {
  let last: Checkpoint | undefined;
  let lastPhase = '';
  try {
    const found = await waitForObject<Checkpoint>(
      kc,
      checkpointsPath(namespace),
      name,
      (obj) => {
        if (obj === undefined) return last !== undefined; // deleted after we saw it
        last = obj;
        const phase = obj.status?.phase ?? 'Pending';
        if (phase !== lastPhase) {
          lastPhase = phase;
          onPhase(obj);
        }
        return isFinished(obj);
      },
      signal,
    );
    if (!found) throw new CliError(`checkpoint.kube32.io/${name} was deleted before it finished (last phase ${lastPhase || 'unknown'})`);
    return found;
  } catch (err: unknown) {
    if (signal.aborted && !(err instanceof CliError) && !(err instanceof ApiError)) {
      // The Checkpoint is not cancelled: say so, and how to follow it.
      throw new CliError(`timed out waiting for checkpoint.kube32.io/${name} to finish (phase ${lastPhase || 'not started'}); it goes on: kubectl get checkpoint ${name} -n ${namespace} -w`, 1, {
        cause: err,
      });
    }
    throw err;
  }
}

function eventTime(ev: CoreEvent): number {
  const t = ev.lastTimestamp ?? ev.eventTime ?? ev.firstTimestamp ?? ev.metadata.creationTimestamp;
  return t ? Date.parse(t) : 0;
}

/**
 * Finds the newest event on pod `podName` with `reason`, recorded at `since` or later (Event times
 * have one-second precision, so one second earlier counts too).
 * @param since epoch ms
 */
export async function findPodEvent(
  kc: KubeConfig,
  namespace: string,
  podName: string,
  reason: string,
  since: number,
  signal?: AbortSignal,
): Promise<CoreEvent | undefined> {
  const q = new URLSearchParams({ fieldSelector: `involvedObject.name=${podName}` });
  const list = await apiJson<{ items?: CoreEvent[] }>(kc, {
    path: `/api/v1/namespaces/${encodeURIComponent(namespace)}/events?${q}`,
    signal,
  });
  const matching = (list.items ?? [])
    .filter((ev) => ev.reason === reason && (ev.involvedObject.kind ?? 'Pod') === 'Pod' && eventTime(ev) >= since - 1000)
    .sort((a, b) => eventTime(b) - eventTime(a));
  return matching[0];
}

/**
 * Ends a command whose Checkpoint failed: its message, then its blockers one a line.
 * @param what the outcome in words, e.g. `pod/x did not move`
 * @throws CliError always (exit code 1)
 */
export function reportFailure(ckpt: Checkpoint, what: string): never {
  const blockers = ckpt.status?.blockers ?? [];
  const lines = [`${what}: ${ckpt.status?.message || 'the checkpoint failed'}`];
  if (blockers.length > 0) lines.push('blockers:', ...blockers.map((b) => `  - ${b}`));
  throw new CliError(lines.join('\n'));
}
