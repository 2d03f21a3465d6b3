/**
 * Every annotation and label name the seeds define for Kube32 objects, in one place (seed 002 "Moves",
 * "Policies", "Periodic checkpoints and node loss", "Retention", "What keeps a pod from moving", "Kubelet
 * endpoints"; docs/etcd.md for the API servers' own). Components refer to `ANNOTATIONS.x` and `LABELS.x`;
 * none writes the strings again.
 */

/** Annotations, by the object they stand on. */
export const ANNOTATIONS = {
  /** Pod: `OnDrain` (default), `Never` or `Auto`. */
  migration: 'kube32.io/migration',
  /** Pod: start from this Checkpoint's data. */
  restoreFrom: 'kube32.io/restore-from',
  /** Pod: `fastest` places it on the fastest node that fits. */
  placement: 'kube32.io/placement',
  /** Pod: periodic checkpoint interval (Go duration, at least 10 s). */
  checkpointInterval: 'kube32.io/checkpoint-interval',
  /** Pod: the interval of `k32_tick` calls (`500ms`, `1s`). */
  tickInterval: 'kube32.io/tick-interval',
  /** Pod: the comma-separated channel topics the pod subscribes to. */
  topics: 'kube32.io/topics',
  /** Pod (set by the API server at create): the SHA-256 (hex) of the pod's module. */
  imageSha256: 'kube32.io/image-sha256',
  /** Pod: an I2C device grant (a blocker: `grant kube32.io/i2c-device`). */
  i2cDevice: 'kube32.io/i2c-device',
  /** Node: interpreter speed, millions of operations per second. */
  interpMops: 'kube32.io/interp-mops',
  /** Node: the worker left (drained itself on SIGTERM). */
  left: 'kube32.io/left',
  /** Checkpoint (set by the controller): when it reached Completed, Saved or Failed (RFC 3339). */
  finishedAt: 'kube32.io/finished-at',
  /** Checkpoint (etcd clusters): the API servers that hold its data in memory. */
  checkpointDataHolders: 'kube32.io/checkpoint-data-holders',
  /** Lease of an API server's identity (etcd clusters): the URL other API servers reach it at. */
  apiserverUrl: 'kube32.io/apiserver-url',
  /** Pod bound to a FeOS node: the ID of its FeOS pod when it is not the Pod's uid (a replacement restored from a hibernation keeps the FeOS pod's ID). */
  feosPodId: 'feos.kube32.io/pod-id',
} as const;

/** Labels, by the object they stand on. */
export const LABELS = {
  /** Checkpoint: what created it: periodic, eviction, memory-pressure or placement. */
  trigger: 'kube32.io/trigger',
  /** Checkpoint (set by the controller on the ones it creates): the pod's name. */
  pod: 'kube32.io/pod',
  /** Node: `feos` on a FeOS node (its microVM pods); absent on a Kube32 Wasm worker. */
  runtime: 'kube32.io/runtime',
} as const;

/** The resource (and annotation, and volume driver) names of the seed's grants and devices. */
export const RESOURCE_NAMES = {
  /** The resource of an I2C device grant (`grant kube32.io/i2c-device`). */
  i2cDevice: 'kube32.io/i2c-device',
  /** The CSI (or flex) volume driver of a board's SD card (`volume claim <claim> on node storage`). */
  sdVolumeDriver: 'kube32.io/sd',
  /** Hardware resources that pin a pod to its node: `hardware.kube32.io/<x>` (all but `ipc`) and `esp32.io/<x>`. */
  hardwarePrefix: 'hardware.kube32.io/',
  /** The one hardware resource that does not pin a pod: inter-pod channels. */
  hardwareIpc: 'hardware.kube32.io/ipc',
  /** The other prefix of hardware resources. */
  esp32Prefix: 'esp32.io/',
} as const;

/** The image form that carries its module's digest: `kube32.io/wasm-sha256:<64 hex digits>`. */
export const DIGEST_IMAGE_PREFIX = 'kube32.io/wasm-sha256:';
/** The image form of a pushed module: `wasm://<name>`. */
export const WASM_IMAGE_PREFIX = 'wasm://';
