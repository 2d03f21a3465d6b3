/**
 * Memory admission (not in the seed; docs/feos/feosd.md, "Memory admission"): a pod boots only when the
 * node can give its memory. The node's allocatable memory is what feosd reports to the fleet
 * (`allocatable_memory_bytes`): the host's memory, `os.totalmem()`, feosd reserving none of it. The
 * pods that hold memory are those that boot or run (PENDING, RUNNING) and those an admitted call is
 * about to boot, resume or restore; a SUSPENDED, STOPPED, FAILED or HIBERNATED pod holds none (its
 * QEMU is gone). A call whose pod does not fit is refused before anything is written, with
 * RESOURCE_EXHAUSTED naming what it asks for and what is left, as a kubelet's admission refuses a pod
 * whose requests exceed the node's allocatable.
 */
import os from 'node:os';
import { type PodInfo, PodState } from '../gen/feos/pod/v1/pod_pb.js';
import { FeosError } from '../api/index.ts';

/** The node's allocatable memory: the host's, as the fleet's reports say. */
export function allocatableMemoryBytes(): bigint {
  return BigInt(os.totalmem());
}

const MIB = 1024n * 1024n;
const GIB = 1024n * MIB;

/** `60 GiB`, `23.4 GiB`, `512 MiB`. */
export function formatMemory(bytes: bigint): string {
  if (bytes >= GIB) return bytes % GIB === 0n ? `${bytes / GIB} GiB` : `${(Number(bytes) / Number(GIB)).toFixed(1)} GiB`;
  return bytes % MIB === 0n ? `${bytes / MIB} MiB` : `${(Number(bytes) / Number(MIB)).toFixed(1)} MiB`;
}

/** The memory each pod holds, for the admission's sums. */
export class MemoryAdmission {
  /** Pods an admitted call is about to boot, resume or restore (pod ID → its memory). */
  readonly #admitted = new Map<string, bigint>();
  readonly #pods: () => PodInfo[];
  readonly #allocatable: () => bigint;

  constructor(pods: () => PodInfo[], allocatable: () => bigint = allocatableMemoryBytes) {
    this.#pods = pods;
    this.#allocatable = allocatable;
  }

  /** The memory held by the pods but `id`: booting or running ones, and those admitted. */
  held(id: string): { bytes: bigint; pods: number } {
    let bytes = 0n;
    let pods = 0;
    for (const p of this.#pods()) {
      if (p.id === id || this.#admitted.has(p.id)) continue;
      if (p.state !== PodState.PENDING && p.state !== PodState.RUNNING) continue;
      bytes += p.spec?.memoryBytes ?? 0n;
      pods++;
    }
    for (const [other, b] of this.#admitted) {
      if (other === id) continue;
      bytes += b;
      pods++;
    }
    return { bytes, pods };
  }

  /**
   * Admits pod `id` with `memoryBytes` for `call` (CreatePod, StartPod, ResumePod, RestorePod): its
   * memory counts from now until the returned release, by which time its record says PENDING or
   * RUNNING (or the call failed).
   * @throws FeosError RESOURCE_EXHAUSTED when the node cannot give it
   */
  admit(id: string, memoryBytes: bigint, call: string): () => void {
    const allocatable = this.#allocatable();
    const held = this.held(id);
    const left = allocatable > held.bytes ? allocatable - held.bytes : 0n;
    if (memoryBytes > left) {
      const others = held.pods === 0 ? 'no other pod holds any' : `${held.pods} other pod${held.pods === 1 ? '' : 's'} that boot or run hold ${formatMemory(held.bytes)}`;
      throw new FeosError(
        'RESOURCE_EXHAUSTED',
        `${call}: pod ${id} asks for ${formatMemory(memoryBytes)} of memory and this node has ${formatMemory(left)} for it: ` +
          `${formatMemory(allocatable)} allocatable (the host's memory), ${others}; give the pod less memory (--memory), or stop pods first`,
      );
    }
    this.#admitted.set(id, memoryBytes);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (this.#admitted.get(id) === memoryBytes) this.#admitted.delete(id);
    };
  }
}
