/** The pods layer of feosd: IDs, specs, records, the pod service and its budget, hibernation, suspend on stop. */
export { PodService, type PodServiceOptions, type PodAction, GUEST_ATTACH_MS } from './service.ts';
export { PodRecords, POD_RECORD_VERSION } from './records.ts';
export { parsePodId, mintPodId, isShortPodId, CROCKFORD } from './id.ts';
export { normalizeSpec, DEFAULT_MEMORY_BYTES, MAX_MEMORY_BYTES, MAX_VCPUS, MIN_MEMORY_BYTES } from './spec.ts';
export { suspendBudgetMs, snapshotTimeoutMs, gibRoundedUp } from './budget.ts';
export { guestVersions } from './guests.ts';
export { guestRegistryEndpoints } from './registries.ts';
export { type PodNetworkProvider, type PodNetworkAttachment, unavailablePodNetwork } from './network.ts';
export { keepClockOnce, measureOffset } from './clock.ts';
export { execInPod, podLogs, portForward } from './streams.ts';
export { type CheckpointManifest, type CheckpointFile, MANIFEST_VERSION, checkpointKey, fileChunks, listCheckpoints, readManifest, newCheckpointName } from './checkpoint.ts';
export { suspendForStop, resumeAfterStop, type StopPods, type SuspendForStopOptions, type SuspendForStopResult, STOP_CONCURRENCY, BUSY_RETRY_MS, STOP_MARGIN_MS } from './suspend-on-stop.ts';
export { readStopRecord, writeStopRecord, removeStopRecord, setStopRecordAside, stopRecordPath, StopRecordError, type StopRecord, STOP_RECORD_FILE } from './stop-record.ts';
export { unforwardedHint } from './bring-up.ts';
export { attachFailureHint, lastBootConsole } from './console.ts';
export { allocatableMemoryBytes, formatMemory, MemoryAdmission } from './admission.ts';
