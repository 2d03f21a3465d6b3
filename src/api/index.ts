/**
 * The Kube32 API (`src/api/`), the door of what every Kube32 component stands on: the API server, the
 * controllers, the kubelet, the CLI, and the components to come (FeOS nodes in the control plane, the
 * fleet service). It holds no state and starts nothing. See docs/api.md.
 *
 * - The `kube32.io/v1` types (Checkpoint, Module) and every annotation and label name of the seeds
 *   (`ANNOTATIONS`, `LABELS`).
 * - The pod rules more than one component applies: the blockers a pod's spec shows (seed 002 "What keeps
 *   a pod from moving"), fitting a pod to a node (`pickNode`, `NodeUsage`), counting a disruption budget
 *   (`budgetCounts`), and the small facts of pods and nodes they rest on.
 * - One client: `RestClient` (kept-alive connections, a kubeconfig's credentials), one error (`ApiError`),
 *   one `Informer` (list then watch, with back-off), one `Backoff`.
 *
 * Components import only this file: `import { ANNOTATIONS, RestClient } from '../api/index.ts'`.
 */
export { ANNOTATIONS, DIGEST_IMAGE_PREFIX, LABELS, RESOURCE_NAMES, WASM_IMAGE_PREFIX } from './names.ts';
export {
  CHECKPOINT_PLURAL,
  type Checkpoint,
  type CheckpointAction,
  type CheckpointEventReason,
  type CheckpointPhase,
  type CheckpointSpec,
  type CheckpointStatus,
  type CheckpointTrigger,
  isFinished,
  KUBE32_GROUP,
  KUBE32_VERSION,
  type MigrationPolicy,
  type Module,
  MODULE_PLURAL,
  type ModuleSpec,
} from './types.ts';
export {
  ENTRY_POINT_EXPORTS,
  HARDWARE_CAPABILITIES,
  I2C_DEVICE_GRANT,
  isHardwareResource,
  MIGRATION_ANNOTATION,
  type ModuleFacts,
  podSpecBlockers,
  SD_VOLUME_DRIVER,
} from './spec-blockers.ts';
export {
  controllerOf,
  isDaemonSetPod,
  isNodeSchedulable,
  isPodActive,
  isPodReady,
  feosPodIdOf,
  isPodRunning,
  migrationPolicy,
  nodeAllocatableMemory,
  nodeMops,
  nodeReadyStatus,
  podHoldsNode,
  podMemoryRequest,
  podCpuRequest,
  nodeAllocatableCpu,
} from './pods.ts';
export { isWasmImage, nodeRuntime, type PodRuntime, podRuntime, RUNTIME_FEOS, runtimeMismatch, runtimeMismatchReason } from './runtime.ts';
export { matchesSelector, type NodeUse, type PickOptions, pickNode, type Placement, podPorts, tolerates } from './fit.ts';
export { NodeUsage } from './node-usage.ts';
export { type BudgetCounts, type BudgetPod, budgetCounts, isBudgetHealthy, scaledIntOrPercent } from './budget.ts';
export {
  ApiError,
  type ApiStatus,
  errorFromAnswer,
  errorMessage,
  hasCode,
  isAlreadyExists,
  isApiError,
  isConflict,
  isNotFound,
  statusMessage,
  toApiError,
} from './errors.ts';
export { Backoff, type BackoffOptions } from '../lib/index.ts';
export { MAX_SOCKETS, readBytes, readText, RestClient, type RestClientOptions, type RestRequest, type RestResponse, type WatchEvent } from './rest.ts';
export { Informer, type InformerHandler, type InformerLog, type InformerOptions, type Lister } from './informer.ts';
export {
  type Amount,
  addAmounts,
  amountAtMost,
  amountOf,
  countedResource,
  formatQuantity,
  namespaceUsage,
  objectUsage,
  podComputeUsage,
  podCountsForQuota,
  QUOTA_COMPUTE_RESOURCES,
  quantityFormat,
  QUOTA_SCOPES,
  quotaMatches,
  quotaSources,
} from './quota.ts';
