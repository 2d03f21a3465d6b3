/**
 * Volumes (seed 000, "Volumes"; feos.volume.v1): disks that outlive the pods they are attached to. A
 * volume's record is `<state-dir>/volumes/<id>.pb` (a feos.volume.v1.Volume, written whole), its disk
 * `<state-dir>/volumes/<id>.qcow2`, made at its first boot. Claims by CreatePod are all or none; a pod's
 * delete leaves its volumes AVAILABLE. A hibernation makes them CHECKPOINTED: their data in the object
 * store alone (the record names the object), until the next boot of a pod with one opens it, or a
 * restore brings it back, ATTACHED; a CHECKPOINTED volume whose pod was deleted stays CHECKPOINTED.
 * Changes are serialised on one queue: a change is seen once kept.
 */
import { existsSync } from 'node:fs';
import { rename, rm } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { clone, create, toBinary } from '@bufbuild/protobuf';
import { timestampNow } from '@bufbuild/protobuf/wkt';
import { type Volume, VolumeSchema, VolumeState } from '../gen/feos/volume/v1/volume_pb.js';
import { writeFileAtomic, type Logger } from '../../lib/index.ts';
import { FeosError } from '../api/index.ts';
import { loadRecordDir } from '../record-dir.ts';
import { checkVolumeLabels } from './labels.ts';

const run = promisify(execFile);
const MIB = 1024n * 1024n;
/** The smallest and largest volume (bytes). */
export const MIN_VOLUME_BYTES = 64n * MIB;
export const MAX_VOLUME_BYTES = 16n * 1024n * 1024n * MIB;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** The record format this code writes. */
export const VOLUME_RECORD_VERSION = 1;

/**
 * Checks a volume ID.
 * @throws FeosError INVALID_ARGUMENT unless it is a lowercase UUID
 */
export function parseVolumeId(id: string): string {
  if (!UUID.test(id)) throw new FeosError('INVALID_ARGUMENT', `volume ID ${JSON.stringify(id)}: want a lowercase UUID`);
  return id;
}

function sameLabels(a: Record<string, string>, b: Record<string, string>): boolean {
  const ka = Object.keys(a).sort();
  const kb = Object.keys(b).sort();
  return ka.length === kb.length && ka.every((k, i) => k === kb[i] && a[k] === b[k]);
}

/** The node's volumes. */
export class VolumeStore {
  readonly dir: string;
  readonly #log: Logger;
  readonly #vols = new Map<string, Volume>();
  #queue: Promise<unknown> = Promise.resolve();

  constructor(dir: string, log: Logger) {
    this.dir = dir;
    this.#log = log;
  }

  /** The disk of a volume. */
  diskPath(id: string): string {
    return join(this.dir, `${id}.qcow2`);
  }

  /** Reads the records; an unreadable one is moved to `.bad` with a log line. */
  async load(): Promise<void> {
    const vols = await loadRecordDir(this.dir, VolumeSchema, 'volume', this.#log, (v, id) => {
      if (v.id !== id) throw new Error(`names volume ${JSON.stringify(v.id)}`);
    });
    for (const v of vols.values()) this.#vols.set(v.id, v);
  }

  get(id: string): Volume | undefined {
    const v = this.#vols.get(id);
    return v && clone(VolumeSchema, v);
  }

  list(): Volume[] {
    return [...this.#vols.keys()].sort().map((id) => this.get(id)!);
  }

  /** Runs one change at a time; `fn` sees the store as the changes before it left it. */
  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.#queue.then(fn);
    this.#queue = p.catch(() => {});
    return p;
  }

  async #save(v: Volume): Promise<void> {
    v.recordVersion = VOLUME_RECORD_VERSION;
    await writeFileAtomic(join(this.dir, `${v.id}.pb`), toBinary(VolumeSchema, v));
    this.#vols.set(v.id, clone(VolumeSchema, v));
  }

  /**
   * CreateVolume: AVAILABLE; the same ID, size and labels find it.
   * @throws FeosError INVALID_ARGUMENT (ID, size, labels: checkVolumeLabels), ALREADY_EXISTS (another size or labels)
   */
  create(id: string, sizeBytes: bigint, labels: Record<string, string>): Promise<Volume> {
    parseVolumeId(id);
    if (sizeBytes % MIB !== 0n || sizeBytes < MIN_VOLUME_BYTES || sizeBytes > MAX_VOLUME_BYTES) {
      throw new FeosError('INVALID_ARGUMENT', `volume ${id}: size_bytes ${sizeBytes}: want 64 MiB to 16 TiB in whole MiB`);
    }
    checkVolumeLabels(id, labels);
    return this.#serial(async () => {
      const have = this.#vols.get(id);
      if (have) {
        if (have.sizeBytes === sizeBytes && sameLabels(have.labels, labels)) return clone(VolumeSchema, have);
        throw new FeosError('ALREADY_EXISTS', `volume ${id} exists with another size or labels`);
      }
      const v = create(VolumeSchema, { id, sizeBytes, labels, state: VolumeState.AVAILABLE, createdAt: timestampNow() });
      await this.#save(v);
      return clone(VolumeSchema, v);
    });
  }

  /**
   * DeleteVolume: the record and the disk.
   * @returns the volume as it was (a CHECKPOINTED one's `checkpointKey` is for the caller to remove)
   * @throws FeosError NOT_FOUND, FAILED_PRECONDITION while a pod has it
   */
  delete(id: string): Promise<Volume> {
    parseVolumeId(id);
    return this.#serial(async () => {
      const v = this.#vols.get(id);
      if (!v) throw new FeosError('NOT_FOUND', `volume ${id} not found`);
      if (v.podId) throw new FeosError('FAILED_PRECONDITION', `volume ${id} is ${v.state === VolumeState.CHECKPOINTED ? 'checkpointed with' : 'attached to'} pod ${v.podId}`);
      await rm(join(this.dir, `${id}.pb`), { force: true });
      await rm(this.diskPath(id), { force: true });
      this.#vols.delete(id);
      return clone(VolumeSchema, v);
    });
  }

  /**
   * Claims the volumes for a pod, all or none: each must be on the node and attached to no other pod.
   * @throws FeosError FAILED_PRECONDITION naming the first that is missing or taken
   */
  claim(podId: string, ids: string[]): Promise<void> {
    return this.#serial(async () => {
      for (const id of ids) {
        const v = this.#vols.get(id);
        if (!v) throw new FeosError('FAILED_PRECONDITION', `volume ${id} is not on the node`);
        if (v.podId && v.podId !== podId) throw new FeosError('FAILED_PRECONDITION', `volume ${id} is attached to pod ${v.podId}`);
      }
      for (const id of ids) {
        const v = clone(VolumeSchema, this.#vols.get(id)!);
        if (v.podId === podId && v.state !== VolumeState.AVAILABLE) continue;
        v.podId = podId;
        // A CHECKPOINTED volume stays so until the pod's boot opens it from the store.
        if (v.state !== VolumeState.CHECKPOINTED) v.state = VolumeState.ATTACHED;
        await this.#save(v);
      }
    });
  }

  /** Lets go of a pod's volumes: AVAILABLE, or CHECKPOINTED with no pod (their data stay in the store). */
  release(podId: string): Promise<void> {
    return this.#serial(async () => {
      for (const v of this.#vols.values()) {
        if (v.podId !== podId) continue;
        const c = clone(VolumeSchema, v);
        c.podId = '';
        if (c.state !== VolumeState.CHECKPOINTED) c.state = VolumeState.AVAILABLE;
        await this.#save(c);
      }
    });
  }

  /**
   * A hibernation put the volume's disk into the object store: CHECKPOINTED, the record naming the
   * object, and the local disk removed.
   */
  checkpointed(id: string, podId: string, data: { key: string; sizeBytes: number; sha256: string }): Promise<void> {
    return this.#serial(async () => {
      const v = this.#vols.get(id);
      if (!v) throw new FeosError('FAILED_PRECONDITION', `volume ${id} is not on the node`);
      const c = clone(VolumeSchema, v);
      c.state = VolumeState.CHECKPOINTED;
      c.podId = podId;
      c.checkpointKey = data.key;
      c.checkpointSizeBytes = BigInt(data.sizeBytes);
      c.checkpointSha256 = data.sha256;
      await this.#save(c);
      await rm(this.diskPath(id), { force: true });
    });
  }

  /** A CHECKPOINTED volume's disk is back in place (a boot or a restore opened it): ATTACHED to `podId`. */
  opened(id: string, podId: string): Promise<void> {
    return this.#serial(async () => {
      const v = this.#vols.get(id);
      if (!v) throw new FeosError('FAILED_PRECONDITION', `volume ${id} is not on the node`);
      const c = clone(VolumeSchema, v);
      c.state = VolumeState.ATTACHED;
      c.podId = podId;
      c.checkpointKey = '';
      c.checkpointSizeBytes = 0n;
      c.checkpointSha256 = '';
      await this.#save(c);
    });
  }

  /**
   * A restore brought a volume the node does not have (from another node's hibernation): recorded
   * ATTACHED to `podId`, its disk already in place.
   * @throws FeosError FAILED_PRECONDITION when the node has a volume of the ID that is not this pod's checkpoint
   */
  adopt(v: { id: string; sizeBytes: bigint; labels: Record<string, string>; formatted: boolean }, podId: string): Promise<void> {
    parseVolumeId(v.id);
    return this.#serial(async () => {
      if (this.#vols.has(v.id)) throw new FeosError('FAILED_PRECONDITION', `volume ${v.id} is on the node already`);
      await this.#save(
        create(VolumeSchema, { id: v.id, sizeBytes: v.sizeBytes, labels: v.labels, formatted: v.formatted, state: VolumeState.ATTACHED, podId, createdAt: timestampNow() }),
      );
    });
  }

  /** Marks volumes formatted once the guest mounted them. */
  markFormatted(ids: string[]): Promise<void> {
    return this.#serial(async () => {
      for (const id of ids) {
        const v = this.#vols.get(id);
        if (!v || v.formatted) continue;
        const c = clone(VolumeSchema, v);
        c.formatted = true;
        await this.#save(c);
      }
    });
  }

  /**
   * Makes a volume's disk (an empty qcow2 of its size) when it has none: at its first boot.
   * @throws FeosError FAILED_PRECONDITION when the volume is missing or CHECKPOINTED (open it from the store first)
   */
  async ensureDisk(id: string): Promise<string> {
    const v = this.#vols.get(id);
    if (!v) throw new FeosError('FAILED_PRECONDITION', `volume ${id} is not on the node`);
    // An empty disk would take the place of a checkpointed volume's data.
    if (v.state === VolumeState.CHECKPOINTED) throw new FeosError('FAILED_PRECONDITION', `volume ${id} is CHECKPOINTED: its data are in the object store (${v.checkpointKey})`);
    const disk = this.diskPath(id);
    if (!existsSync(disk)) {
      await run('qemu-img', ['create', '-q', '-f', 'qcow2', `${disk}.tmp`, String(v.sizeBytes)]);
      await rename(`${disk}.tmp`, disk);
    }
    return disk;
  }

  /**
   * After a crash between two records: volumes whose pod is gone are let go, and the volumes that kept
   * pods name and that name no pod are claimed for them.
   */
  async recover(pods: Array<{ id: string; volumeIds: string[] }>): Promise<void> {
    const known = new Set(pods.map((p) => p.id));
    for (const v of this.list()) {
      if (v.podId && !known.has(v.podId)) {
        this.#log.warn({ volume: v.id, pod: v.podId }, 'volume: its pod is gone; let go');
        await this.release(v.podId);
      }
    }
    for (const p of pods) {
      const unclaimed = p.volumeIds.filter((id) => this.#vols.get(id) && !this.#vols.get(id)!.podId);
      if (unclaimed.length > 0) await this.claim(p.id, unclaimed).catch(() => {});
    }
  }
}
