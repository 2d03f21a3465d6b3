/**
 * The `kube32.io/v1` objects (seed 002 "Checkpoint objects and data", "Moves", "Policies", "Periodic
 * checkpoints and node loss", "Retention"): Checkpoints, Modules, their phases, triggers and event reasons.
 * Every component that reads or writes them (the API server, the controllers, the kubelet, the CLI) uses
 * these types. The annotation and label names are in names.ts.
 */
import type { KubernetesObject, V1ObjectMeta } from '@kubernetes/client-node';

/** API group and version of Checkpoints. */
export const KUBE32_GROUP = 'kube32.io';
export const KUBE32_VERSION = 'v1';
export const CHECKPOINT_PLURAL = 'checkpoints';

/** Values of `kube32.io/trigger`. */
export type CheckpointTrigger = 'periodic' | 'eviction' | 'memory-pressure' | 'placement';

/** Values of `kube32.io/migration`. */
export type MigrationPolicy = 'OnDrain' | 'Never' | 'Auto';

/** `spec.action` of a Checkpoint. */
export type CheckpointAction = 'Save' | 'Move';

/** `status.phase` of a Checkpoint, seed "Moves". */
export type CheckpointPhase = 'Pending' | 'Saving' | 'Saved' | 'Moving' | 'Completed' | 'Failed';

/** Events the checkpoint controller records on pods, seed "Moves". */
export type CheckpointEventReason = 'Checkpointed' | 'CheckpointFailed' | 'Moving' | 'Moved' | 'MoveFailed' | 'Restored';

/** `spec` of a kube32.io/v1 Checkpoint. */
export interface CheckpointSpec {
  /** The pod, required. */
  podName: string;
  /** Its container; default: the only container. */
  containerName?: string;
  /** `Save` (default) or `Move`. */
  action?: CheckpointAction;
  /** For `Move`: a node name or a node selector; neither: the scheduler picks. */
  target?: { nodeName?: string; nodeSelector?: Record<string, string> };
}

/** `status` of a kube32.io/v1 Checkpoint: every field of the seed's table. */
export interface CheckpointStatus {
  phase?: CheckpointPhase;
  /** Where the snapshot was taken. */
  nodeName?: string;
  /** When the snapshot was taken (the freeze), RFC 3339 with milliseconds. */
  takenAt?: string;
  /** Facts of the stored snapshot, set by the API server on the data PUT. */
  sizeBytes?: number;
  snapshotSha256?: string;
  imageSha256?: string;
  podTimeMs?: number;
  /**
   * Which kind of snapshot the Checkpoint holds (issue 18): `wasm`, a Wasm pod's snapshot in the Checkpoint's
   * data (set by the checkpoint controller when the data is stored); `microvm`, a microVM pod's hibernation
   * in the FeOS nodes' object store (set by the FeOS kubelet once HibernatePod answered).
   */
  snapshotKind?: 'wasm' | 'microvm';
  /**
   * `microvm`: the FeOS checkpoint in the object store (`pods/<pod ID>/<snapshotName>/`) that RestorePod
   * takes. Absent with `snapshotKind: microvm`: the hibernation failed, `message` says why.
   */
  snapshotName?: string;
  /** The outcome of a move. */
  targetNode?: string;
  newPodName?: string;
  message?: string;
  blockers?: string[];
}

/** `spec` of a kube32.io/v1 Module (cluster-scoped): the pushed module's digest and size. */
export interface ModuleSpec {
  /** SHA-256 of the module's bytes, 64 lowercase hex digits. */
  sha256: string;
  /** Size of the module, bytes. */
  sizeBytes: number;
}

/** A kube32.io/v1 Module: a WebAssembly module pushed under a name (`image: wasm://<name>`). */
export interface Module extends KubernetesObject {
  metadata?: V1ObjectMeta;
  spec: ModuleSpec;
}

/** The plural of Modules (`/apis/kube32.io/v1/modules`). */
export const MODULE_PLURAL = 'modules';

/** A kube32.io/v1 Checkpoint. */
export interface Checkpoint extends KubernetesObject {
  apiVersion?: string;
  kind?: string;
  metadata?: V1ObjectMeta;
  spec: CheckpointSpec;
  status?: CheckpointStatus;
}

/** Phases after which a Checkpoint changes no more. */
export function isFinished(phase: CheckpointPhase | undefined): boolean {
  return phase === 'Saved' || phase === 'Completed' || phase === 'Failed';
}
