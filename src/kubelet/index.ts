/**
 * The kube32-sim worker (the Kube32 kubelet): its public door. Other components import only this
 * file. `main(argv)` in `main.ts` is the executable; `startKubelet` runs a worker in-process.
 * Seed 002: "Kubelet endpoints", "What moves", "What keeps a pod from moving", "Drain and
 * evictions", "Policies".
 */
export { startKubelet, type Kubelet, type KubeletOptions } from './kubelet.ts';
export { planNodes, startNodes, nextAddress, NodeStartError, MAX_NODES_PER_PROCESS, type NodePlan, type NodePlanOptions, type NodeHost, type SharedNodeOptions } from './host.ts';
export { selfDrain, isDaemonSetPod, SELF_DRAIN_TIMEOUT_MS, type DrainReport } from './drain.ts';
export {
  MEMORY_PRESSURE_BYTES,
  HEARTBEAT_MS,
  LEASE_DURATION_SECONDS,
  INTERP_MOPS_ANNOTATION,
  LEFT_ANNOTATION,
  HOLDER_IDENTITY_FILE,
  NodeHeldError,
  heldByAnother,
  loadHolderIdentity,
  formatMops,
} from './node.ts';
export { IMAGE_SHA256_ANNOTATION, DIGEST_IMAGE_PREFIX, imageDigest } from './modules.ts';
export { TICK_INTERVAL_ANNOTATION, TOPICS_ANNOTATION, RESTORE_FROM_ANNOTATION } from './pod-spec.ts';
export { DEFAULT_FREEZE_TIMEOUT_MS, MAX_FREEZE_TIMEOUT_MS } from './server.ts';
export { CONTROL_PLANE_USER, ADMIN_GROUP } from './auth.ts';
export { buildPodStatus, ownedStatusText, podPhase, type ContainerView } from './pod-status.ts';
export { crashBackoff, BACKOFF_INITIAL_MS, BACKOFF_MAX_MS, BACKOFF_RESET_MS } from './container.ts';
