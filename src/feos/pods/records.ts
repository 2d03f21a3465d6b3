/**
 * The pods' records (seed 000, "feosd", "Directories"): `<state-dir>/pods/<id>.pb`, each a
 * feos.pod.v1.PodInfo written whole and fsynced. A change is seen at once (GetPod and ListPods read
 * memory and never wait for a write); the writes run on a queue of their own, in the order of the
 * changes, and `save` resolves once the change is kept.
 */
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { clone, toBinary } from '@bufbuild/protobuf';
import { type PodInfo, PodInfoSchema } from '../gen/feos/pod/v1/pod_pb.js';
import { writeFileAtomic, type Logger } from '../../lib/index.ts';
import { loadRecordDir } from '../record-dir.ts';
import { parsePodId } from './id.ts';

/** The record format this code writes. */
export const POD_RECORD_VERSION = 1;

/** The pods' records, in memory and on disk. */
export class PodRecords {
  readonly dir: string;
  readonly #log: Logger;
  readonly #pods = new Map<string, PodInfo>();
  #queue: Promise<void> = Promise.resolve();

  constructor(dir: string, log: Logger) {
    this.dir = dir;
    this.#log = log;
  }

  /**
   * Reads every record. A record that cannot be read, or names another ID, is moved aside to
   * `<id>.pb.bad` with a log line: it is never taken for a pod, and never lost.
   */
  async load(): Promise<void> {
    const pods = await loadRecordDir(this.dir, PodInfoSchema, 'pod', this.#log, (pod, id) => {
      if (parsePodId(pod.id) !== id) throw new Error(`names pod ${JSON.stringify(pod.id)}`);
      if (pod.recordVersion > POD_RECORD_VERSION) throw new Error(`record version ${pod.recordVersion} is newer than ${POD_RECORD_VERSION}`);
    });
    for (const pod of pods.values()) this.#pods.set(pod.id, pod);
  }

  /** The pod as it is now (a copy). */
  get(id: string): PodInfo | undefined {
    const p = this.#pods.get(id);
    return p && clone(PodInfoSchema, p);
  }

  /** Every pod (copies), by ID. */
  list(): PodInfo[] {
    return [...this.#pods.keys()].sort().map((id) => this.get(id)!);
  }

  /** Sees the change at once and resolves once it is kept on disk. */
  save(pod: PodInfo): Promise<void> {
    const copy = clone(PodInfoSchema, pod);
    copy.recordVersion = POD_RECORD_VERSION;
    this.#pods.set(copy.id, copy);
    const bytes = toBinary(PodInfoSchema, copy);
    return this.#enqueue(() => writeFileAtomic(join(this.dir, `${copy.id}.pb`), bytes));
  }

  /** Forgets the pod at once and resolves once its record is removed. */
  remove(id: string): Promise<void> {
    this.#pods.delete(id);
    return this.#enqueue(() => rm(join(this.dir, `${id}.pb`), { force: true }));
  }

  #enqueue(write: () => Promise<void>): Promise<void> {
    const p = this.#queue.then(write);
    this.#queue = p.catch(() => {});
    return p;
  }
}
