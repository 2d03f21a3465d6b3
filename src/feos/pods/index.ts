/** The pods layer of feosd: IDs, specs, records, the pod service and its budget. */
export { PodService, type PodServiceOptions, type PodAction, GUEST_ATTACH_MS } from './service.ts';
export { PodRecords, POD_RECORD_VERSION } from './records.ts';
export { parsePodId, mintPodId, isShortPodId, CROCKFORD } from './id.ts';
export { normalizeSpec, DEFAULT_MEMORY_BYTES } from './spec.ts';
export { suspendBudgetMs, snapshotTimeoutMs, gibRoundedUp } from './budget.ts';
export { guestVersions } from './guests.ts';
export { type PodNetworkProvider, type PodNetworkAttachment, unavailablePodNetwork } from './network.ts';
export { keepClockOnce, measureOffset } from './clock.ts';
export { execInPod, podLogs, portForward } from './streams.ts';
