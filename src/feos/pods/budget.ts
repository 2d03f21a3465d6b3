/**
 * The suspend's budget (seed 000, "The suspend's budget"): GiB is the microVM's memory rounded up.
 *
 * | Part                                                                 | Takes at most     |
 * |----------------------------------------------------------------------|-------------------|
 * | before the snapshot (guest empties memory, pause, snapshot's dir)    | 40 s              |
 * | the snapshot                                                         | 120 s + 4 s/GiB   |
 * | after it (QEMU's end, records, zero pages punched out)               | 30 s + 1 s/GiB    |
 * | the budget                                                           | 190 s + 5 s/GiB   |
 */

const GIB = 1024n ** 3n;

/** The memory in whole GiB, rounded up. */
export function gibRoundedUp(memoryBytes: bigint): number {
  return Number((memoryBytes + GIB - 1n) / GIB);
}

/** The snapshot's own timeout (ms): 120 s + 4 s per GiB. */
export function snapshotTimeoutMs(memoryBytes: bigint): number {
  return (120 + 4 * gibRoundedUp(memoryBytes)) * 1000;
}

/** The whole suspend's budget (ms): 190 s + 5 s per GiB; a SuspendPod answers within it. */
export function suspendBudgetMs(memoryBytes: bigint): number {
  return (190 + 5 * gibRoundedUp(memoryBytes)) * 1000;
}
