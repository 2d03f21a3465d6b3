/**
 * Every call that changes a pod, as one discriminated union (STYLE.md 5.9), and the timeouts the seed
 * gives the pod service's calls to a guest (seed 000, "A pod", "The guest").
 */
import type { ImageLayers, PodSpec } from '../gen/feos/pod/v1/pod_pb.js';

/** How long a boot's guest has to attach (seed: 60 s). */
export const GUEST_ATTACH_MS = 60_000;
/** The ping of a resumed guest, its connect included (seed: 30 s). */
export const RESUME_PING_MS = 30_000;
/** A push (time, network) and the request to empty the memory (seed: 10 s). */
export const PUSH_MS = 10_000;
/** A call to the guest for the API, its connect included (seed: 5 s). */
export const GUEST_CALL_MS = 5_000;
/** How long a stop waits for the guest to power off before QEMU is ended (ms). */
export const SHUTDOWN_WAIT_MS = 30_000;
/** How long a container's create may take, its image's pull included (ms). */
export const CONTAINER_CREATE_MS = 900_000;
/** How long a container's start may take (ms). */
export const CONTAINER_START_MS = 60_000;

/**
 * Every call that changes a pod. Each runs under the pod's lock in a task of its own; the comment
 * says the state it needs.
 */
export type PodAction =
  /**
   * Any state: the pod exists (same spec) or not. `imageLayers` (seed "Baked images"): kept in a new
   * pod's record, never compared.
   */
  | { kind: 'create'; spec: PodSpec; pullToken?: string; imageLayers?: ImageLayers }
  /** STOPPED or FAILED. */
  | { kind: 'start'; pullToken?: string }
  /** Any but deleted. */
  | { kind: 'stop' }
  /** Any. */
  | { kind: 'delete' }
  /**
   * RUNNING (SUSPENDED answers as it is). `deadline` (`Date.now()` ms), feosd's own stop's: a snapshot
   * that would end later is cancelled then (busy), whatever its own timeout.
   */
  | { kind: 'suspend'; deadline?: number; reason?: string }
  /**
   * SUSPENDED (RUNNING answers as it is); HIBERNATED restores from the pod's checkpoint (`diskOnly`:
   * a fresh boot on the checkpoint's disk). A resume that fails before the vCPUs run leaves the pod
   * SUSPENDED with its snapshot and the failure as its reason. `keepSuspendedOnFailure` (feosd's resumes
   * after a stop): one whose guest does not answer after its vCPUs run leaves it RUNNING, logged, instead of FAILED.
   */
  | { kind: 'resume'; keepSuspendedOnFailure?: boolean; diskOnly?: boolean }
  /**
   * RUNNING or SUSPENDED (with its memory), STOPPED or FAILED (its disk alone); HIBERNATED answers as
   * it is. `noAbandon`: a ResumePod does not abandon it (a drain).
   */
  | { kind: 'hibernate'; noAbandon?: boolean; keepRunning?: boolean }
  /**
   * HIBERNATED, or a pod the node does not have whose checkpoint is in the object store (the latest,
   * or `checkpoint`); `diskOnly`: a fresh boot on the checkpoint's disk.
   */
  | { kind: 'restore'; checkpoint?: string; diskOnly?: boolean };
