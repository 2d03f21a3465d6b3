/**
 * The objects the controllers read and write, and the seed's names for annotations, labels, events and
 * phases (seed 002 "Checkpoint objects and data", "Policies", "Periodic checkpoints and node loss", "Retention").
 */
import type { KubernetesObject, V1ObjectMeta } from '@kubernetes/client-node';

/** API group and version of Checkpoints. */
export const KUBE32_GROUP = 'kube32.io';
export const KUBE32_VERSION = 'v1';
export const CHECKPOINT_PLURAL = 'checkpoints';

/** Annotations and labels of the seed. */
export const ANNOTATIONS = {
  /** Pod: `OnDrain` (default), `Never` or `Auto`. */
  migration: 'kube32.io/migration',
  /** Pod: start from this Checkpoint's data. */
  restoreFrom: 'kube32.io/restore-from',
  /** Pod: `fastest` places it on the fastest node that fits. */
  placement: 'kube32.io/placement',
  /** Pod: periodic checkpoint interval (Go duration, at least 10 s). */
  checkpointInterval: 'kube32.io/checkpoint-interval',
  /** Node: interpreter speed, millions of operations per second. */
  interpMops: 'kube32.io/interp-mops',
  /** Node: the worker left (drained itself on SIGTERM). */
  left: 'kube32.io/left',
  /** Checkpoint (set by the controller): when it reached Completed, Saved or Failed (RFC 3339). */
  finishedAt: 'kube32.io/finished-at',
} as const;

export const LABELS = {
  /** Checkpoint: what created it: periodic, eviction, memory-pressure or placement. */
  trigger: 'kube32.io/trigger',
  /** Checkpoint (set by the controller on the ones it creates): the pod's name. */
  pod: 'kube32.io/pod',
} as const;

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
  /** The outcome of a move. */
  targetNode?: string;
  newPodName?: string;
  message?: string;
  blockers?: string[];
}

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
