/**
 * HibernatePod (seed 000, "A pod": Hibernate and Restore; "Addresses": hibernating takes the pod off
 * the network as a delete does). A hibernation suspends a running pod as SuspendPod does, puts its
 * memory and disk into the object store under its ID with a manifest written last, and then lets go of
 * its local files and its network place: the pod is HIBERNATED, its record naming the checkpoint. Its
 * volumes' disks go into the store beside it and the volumes are CHECKPOINTED (seed "Volumes").
 *
 * It runs in a task of its own holding the pod's lock: a caller that goes away leaves it running, a
 * second HibernatePod joins it and gets its answer, GetPod shows it in `PodInfo.hibernation`, and a
 * ResumePod abandons it until its manifest is being put, unless a call said `no_abandon` or the pod has
 * no memory: the hibernation stops, its uploads are removed, its calls fail with ABORTED, and the pod
 * resumes from its snapshot on the node.
 */
import { hostname } from 'node:os';
import { existsSync } from 'node:fs';
import { rm, stat } from 'node:fs/promises';
import { clone, create, toJson } from '@bufbuild/protobuf';
import { TimestampSchema } from '@bufbuild/protobuf/wkt';
import { HibernationStatusSchema, type HibernationStatus, type PodInfo, PodInfoSchema, PodState, type PodVolume } from '../gen/feos/pod/v1/pod_pb.js';
import { errorMessage, FeosError } from '../api/index.ts';
import { vmPaths } from '../microvm/index.ts';
import { PackWriter, PieceBuffers, storeFailureCode } from '../store/index.ts';
import { podDiskPath } from './bring-up.ts';
import { checkpointKey, DISK_FILE, fileChunks, growingFileChunks, MANIFEST_VERSION, manifestBytes, MEMORY_FILE, hibernationBase, newCheckpointName, packPrefix, prunePodChunks, volumeKey, type CheckpointFile, type CheckpointManifest, type CheckpointVolume, neededBases } from './checkpoint.ts';
import type { PodCore } from './core.ts';
import { resumeLocked, suspendLocked } from './lifecycle.ts';
import { removeInFlight, writeInFlight } from './in-flight.ts';
import { dirname } from 'node:path';

/** The node's state dir (the pods' records are its `pods/`). */
export function stateDirOf(core: PodCore): string {
  return dirname(core.o.records.dir);
}

/** The steps of a hibernation, in order; a ResumePod abandons one before `manifest`. */
export type HibernationStep = 'waiting' | 'suspend' | 'upload' | 'manifest' | 'release';

/** A hibernation in flight. */
export interface Hibernation {
  checkpoint: string;
  step: HibernationStep;
  /** Set by any HibernatePod of it with `no_abandon` (a drain). */
  noAbandon: boolean;
  /** Whether the pod hibernates with its memory (it was RUNNING or SUSPENDED). */
  memory: boolean;
  /** `keep_running`: after the manifest the pod is resumed (if it was RUNNING) and keeps its microVM, disk and network. */
  keepRunning: boolean;
  bytesDone: number;
  bytesTotal: number;
  /** Of `bytesDone`, the bytes uploaded (chunks the store lacked). */
  bytesUploaded: number;
  /** Aborted by a ResumePod that abandons it. */
  abandon: AbortController;
  /** The hibernation's answer, which every call that joined it gets. */
  done: Promise<PodInfo>;
}

/** What GetPod shows of a hibernation in flight. */
export function hibernationStatus(h: Hibernation): HibernationStatus {
  return create(HibernationStatusSchema, {
    checkpoint: h.checkpoint,
    step: h.step,
    noAbandon: h.noAbandon,
    bytesDone: BigInt(h.bytesDone),
    bytesTotal: BigInt(h.bytesTotal),
    bytesUploaded: BigInt(h.bytesUploaded),
  });
}

/**
 * Whether a ResumePod that comes now abandons the hibernation (seed: until its heads are being put,
 * unless a call said no_abandon or the pod has no memory).
 */
export function abandonable(h: Hibernation): boolean {
  return !h.noAbandon && h.memory && (h.step === 'waiting' || h.step === 'suspend' || h.step === 'upload');
}

/**
 * HibernatePod: starts the pod's hibernation in a task of its own, or joins the one in flight.
 * @throws FeosError FAILED_PRECONDITION (no object store; a state that does not hibernate),
 *   NOT_FOUND, ABORTED (a ResumePod abandoned it), UNAVAILABLE (busy; the store failed: the pod stays
 *   SUSPENDED or as it was, its uploads removed)
 */
export function hibernatePod(core: PodCore, id: string, noAbandon: boolean, keepRunning = false): Promise<PodInfo> {
  const store = core.o.objectStore;
  if (!store) return Promise.reject(new FeosError('FAILED_PRECONDITION', 'feosd has no object store: pods do not hibernate (start it with --object-store s3://BUCKET/PREFIX or file:///path)'));
  const pod0 = core.o.records.get(id);
  const entry = core.entries.get(id);
  if (!pod0 || !entry) return Promise.reject(new FeosError('NOT_FOUND', `pod ${id} not found`));
  if (entry.hibernation) {
    // A hibernation that releases the pod after one that keeps it running: its turn after it.
    if (entry.hibernation.keepRunning && !keepRunning) {
      return entry.hibernation.done.then(
        () => hibernatePod(core, id, noAbandon),
        () => hibernatePod(core, id, noAbandon),
      );
    }
    if (noAbandon) entry.hibernation.noAbandon = true;
    return entry.hibernation.done;
  }
  if (pod0.state === PodState.HIBERNATED) return Promise.resolve(pod0);
  if (keepRunning && pod0.state !== PodState.RUNNING && pod0.state !== PodState.SUSPENDED) {
    return Promise.reject(new FeosError('FAILED_PRECONDITION', `pod ${id} is ${PodState[pod0.state]}: a checkpoint that keeps the pod running (keep_running) is of a RUNNING or SUSPENDED pod`));
  }
  if (pod0.state === PodState.PENDING) {
    return Promise.reject(new FeosError('FAILED_PRECONDITION', `pod ${id} is PENDING: a RUNNING, SUSPENDED, STOPPED or FAILED pod hibernates; wait for its bring-up`));
  }
  const h: Hibernation = {
    checkpoint: newCheckpointName(),
    step: 'waiting',
    noAbandon,
    memory: pod0.state === PodState.RUNNING || pod0.state === PodState.SUSPENDED,
    keepRunning,
    bytesDone: 0,
    bytesTotal: 0,
    bytesUploaded: 0,
    abandon: new AbortController(),
    done: Promise.resolve(pod0),
  };
  entry.hibernation = h;
  h.done = core
    .locked(id, (pod) => hibernateLocked(core, pod, h))
    .finally(() => {
      if (entry.hibernation === h) entry.hibernation = undefined;
    });
  // Every caller may go away; the task's end is logged once.
  h.done.catch((err: unknown) => core.log.warn({ id, checkpoint: h.checkpoint, err: errorMessage(err) }, 'hibernation failed'));
  return h.done;
}

function abandoned(id: string): FeosError {
  return new FeosError('ABORTED', `the hibernation of pod ${id} was abandoned for a ResumePod; the pod resumes from its snapshot on the node`);
}

async function hibernateLocked(core: PodCore, pod: PodInfo, h: Hibernation): Promise<PodInfo> {
  const o = core.o;
  const store = o.objectStore!;
  const id = pod.id;
  if (pod.state === PodState.HIBERNATED) return pod;
  if (h.abandon.signal.aborted) throw abandoned(id);
  const ok = [PodState.RUNNING, PodState.SUSPENDED, PodState.STOPPED, PodState.FAILED];
  if (!ok.includes(pod.state)) {
    throw new FeosError('FAILED_PRECONDITION', `pod ${id} is ${PodState[pod.state]}: a RUNNING, SUSPENDED, STOPPED or FAILED pod hibernates`);
  }
  h.memory = pod.state === PodState.RUNNING || pod.state === PodState.SUSPENDED;
  const t0 = performance.now();
  // feosd's CPU time over the hibernation, its hash workers' included (logged: the bench compares it with the SDK's).
  const cpu0 = process.cpuUsage();
  const wasRunning = pod.state === PodState.RUNNING;
  const disk = podDiskPath(core, id);
  if (!existsSync(disk)) throw new FeosError('FAILED_PRECONDITION', `pod ${id} has no disk yet (it never booted): nothing to hibernate`);
  // The pod's files, then its volumes' disks (made when a boot never made them: an empty volume).
  const vmstate = vmPaths(o.vms.dir(id)).vmstate;
  const files: Array<{ name: string; key: string; path: string; volume?: PodVolume }> = [];
  if (h.memory) files.push({ name: MEMORY_FILE, key: checkpointKey(id, h.checkpoint, MEMORY_FILE), path: vmstate });
  files.push({ name: DISK_FILE, key: checkpointKey(id, h.checkpoint, DISK_FILE), path: disk });
  for (const v of pod.spec!.volumes) {
    files.push({ name: `volume ${v.name}`, key: volumeKey(v.volumeId, h.checkpoint), path: await o.volumes!.ensureDisk(v.volumeId), volume: v });
  }
  // A kill from here on is found by the next feosd: with the manifest in the store it finishes the
  // release, without it it withdraws the uploads (src/feos/pods/recovery.ts); a kill during the suspend
  // leaves the pod as its microVM is.
  try {
    await writeInFlight(stateDirOf(core), { id, kind: 'hibernate', checkpoint: h.checkpoint, token: '' });
  } catch (err: unknown) {
    throw new FeosError('UNAVAILABLE', `hibernate pod ${id}: the node's state dir: ${errorMessage(err)}; nothing was uploaded, the pod stays ${PodState[pod.state]} on the node`, { cause: err });
  }
  // A RUNNING pod is suspended while its memory goes up: QEMU's stream is cut and uploaded as QEMU writes it
  // (bench/feos-s3: one after the other, QEMU's write of the stream was a fifth of the hibernation), unless a
  // stream is at its place before the suspend (not this suspend's: the suspend removes it first). The disk and
  // the volumes go up once the suspend has stopped QEMU.
  const t = { suspendMs: 0, uploadMs: 0, waitedMs: 0, manifestMs: 0, manifestBytes: 0, base: '', overlapped: 0, cpuMs: 0 };
  let suspending: Promise<PodInfo> | undefined;
  // The buffers the memory and the disk are read into, which the pack writer gives back as it is done with them.
  const pieces = new PieceBuffers();
  let memorySource: AsyncIterable<Uint8Array> | undefined;
  if (wasRunning) {
    h.step = 'suspend';
    const follow = !existsSync(vmstate);
    suspending = suspendLocked(core, pod, { reason: 'suspended to hibernate' });
    // The stream is whole: what is left is upload. A failure is the hibernation's, seen where it is awaited.
    suspending.then(
      () => {
        t.suspendMs = Math.round(performance.now() - t0);
        if (h.step === 'suspend') h.step = 'upload';
      },
      () => {},
    );
    if (follow) {
      memorySource = growingFileChunks(vmstate, suspending, h.abandon.signal, pieces);
    } else {
      try {
        pod = await suspending;
      } catch (err: unknown) {
        await removeInFlight(stateDirOf(core), id, 'hibernate').catch(() => {});
        throw err;
      }
      suspending = undefined;
    }
  }
  if (!suspending) {
    t.suspendMs = Math.round(performance.now() - t0);
    h.step = 'upload';
  }
  const written: CheckpointFile[] = [];
  const volumes: CheckpointVolume[] = [];
  let volumeBytes = 0;
  let packs: PackWriter | undefined;
  // The newest checkpoint, whose manifest the new one names runs of chunks of (checkpoint.ts, manifestBytes).
  let base: CheckpointManifest | undefined;
  t.overlapped = memorySource ? 1 : 0;
  const u0 = performance.now();
  // The suspend's end: the pod SUSPENDED, what it was is the record's (the disk goes up after it).
  const suspended = async () => {
    if (!suspending) return;
    const s = suspending;
    suspending = undefined;
    pod = await s;
  };
  // Progress only: the disk's size before QEMU stopped is near enough until the memory is up.
  const sizes = async (skipMemory: boolean) => {
    let n = 0;
    for (const f of files) if (!(skipMemory && f.name === MEMORY_FILE)) n += (await stat(f.path)).size;
    return n;
  };
  const removeUploads = async () => {
    await packs?.settle();
    for (const f of files) if (f.volume) await store.delete(f.key).catch(() => {});
    // The packs this hibernation added (those of earlier checkpoints stay), half-written objects and the
    // checkpoint's directories.
    for (const k of packs?.created ?? []) await store.delete(k).catch(() => {});
    for (const f of files) await store.deleteLeftovers?.(f.key.slice(0, f.key.lastIndexOf('/'))).catch(() => {});
  };
  try {
    let before = 0;
    const stands = await hibernationBase(store, id);
    base = stands.base;
    packs = new PackWriter(store, packPrefix(id), stands.index, { signal: h.abandon.signal, pieces });
    h.bytesTotal = await sizes(memorySource !== undefined);
    for (const f of files) {
      if (h.abandon.signal.aborted) throw abandoned(id);
      const onProgress = (n: number) => {
        h.bytesDone = before + n;
        h.bytesUploaded = packs!.uploadedBytes + volumeBytes;
      };
      if (!f.volume) {
        const following = f.name === MEMORY_FILE && memorySource;
        const put = await packs.putFile(following ? memorySource! : fileChunks(f.path, h.abandon.signal, pieces), onProgress);
        if (following) {
          await suspended();
          h.bytesTotal = put.sizeBytes + (await sizes(true));
        }
        before += put.sizeBytes;
        written.push({ name: f.name, sizeBytes: put.sizeBytes, sha256: put.sha256, packed: put.chunks });
        continue;
      }
      const put = await store.put(f.key, fileChunks(f.path, h.abandon.signal), { signal: h.abandon.signal, onProgress });
      before += put.sizeBytes;
      volumeBytes += put.sizeBytes;
      const rec = o.volumes!.get(f.volume.volumeId)!;
      volumes.push({
        name: f.volume.name,
        volumeId: rec.id,
        sizeBytes: String(rec.sizeBytes),
        labels: { ...rec.labels },
        formatted: rec.formatted,
        key: f.key,
        fileSizeBytes: put.sizeBytes,
        sha256: put.sha256,
      });
    }
    await packs.finish();
    h.bytesUploaded = packs.uploadedBytes + volumeBytes;
    t.uploadMs = Math.round(performance.now() - u0);
    t.waitedMs = Math.round(packs.waitedMs);
    if (h.abandon.signal.aborted) throw abandoned(id);
  } catch (err: unknown) {
    // A suspend under way ends first (the pod SUSPENDED, or as its failure left it); its failure is the hibernation's.
    let suspendFailed: { err: unknown } | undefined;
    await suspended().catch((e: unknown) => {
      suspendFailed = { err: e };
    });
    await removeUploads();
    await removeInFlight(stateDirOf(core), id, 'hibernate').catch(() => {});
    if (suspendFailed) throw suspendFailed.err;
    if (h.abandon.signal.aborted) throw abandoned(id);
    throw new FeosError(storeFailureCode(err), `hibernate pod ${id}: upload: ${errorMessage(err)}; the pod stays ${PodState[pod.state]} on the node`, { cause: err });
  }
  // The manifest makes the checkpoint whole: from here on nothing abandons it.
  h.step = 'manifest';
  const m0 = performance.now();
  try {
    const body = manifestBytes({
        version: MANIFEST_VERSION,
        podId: id,
        checkpoint: h.checkpoint,
        createdAt: new Date().toISOString(),
        ...(pod.createdAt ? { podCreatedAt: toJson(TimestampSchema, pod.createdAt) as string } : {}),
        node: hostname(),
        guestVersion: pod.guestVersion,
        memory: h.memory,
        spec: pod.spec!,
        files: written,
        volumes,
        uploadedBytes: h.bytesUploaded,
      }, base);
    t.manifestBytes = body.byteLength;
    t.base = base?.checkpoint ?? '';
    await store.put(checkpointKey(id, h.checkpoint, 'manifest.json'), body);
    t.manifestMs = Math.round(performance.now() - m0);
    const cpu = process.cpuUsage(cpu0);
    t.cpuMs = Math.round((cpu.user + cpu.system) / 1000);
  } catch (err: unknown) {
    await removeUploads();
    await removeInFlight(stateDirOf(core), id, 'hibernate').catch(() => {});
    throw new FeosError(storeFailureCode(err), `hibernate pod ${id}: manifest: ${errorMessage(err)}; the pod stays ${PodState[pod.state]} on the node`, { cause: err });
  }
  if (h.keepRunning) return keptRunning(core, pod, h, wasRunning, t, volumes);
  h.step = 'release';
  const released = await releaseHibernated(core, pod, h.checkpoint, h.memory, volumes);
  await pruneAfter(core, id, 'hibernate');
  core.log.info({ id, checkpoint: h.checkpoint, bytes: h.bytesDone, uploaded: h.bytesUploaded, ...t }, 'hibernated');
  return released;
}

/**
 * The end of a `keep_running` hibernation whose manifest is in the store: nothing is released. Its volumes'
 * disks stay the node's (the checkpoint holds a copy), its in-flight marker goes, and a pod that was
 * RUNNING is resumed (`resumed after checkpoint X`): its processes go on, its microVM and addresses kept.
 * A resume that fails leaves the pod SUSPENDED (the checkpoint is whole either way).
 * @returns the pod's record with `checkpoint` naming the new checkpoint (in the answer only: the record
 *   keeps `checkpoint` for a HIBERNATED pod's own)
 */
async function keptRunning(core: PodCore, pod: PodInfo, h: Hibernation, wasRunning: boolean, t: Record<string, number | string>, volumes: CheckpointVolume[]): Promise<PodInfo> {
  const id = pod.id;
  await removeInFlight(stateDirOf(core), id, 'hibernate');
  let now = pod;
  if (wasRunning) {
    now = await resumeLocked(core, pod, true, `resumed after checkpoint ${h.checkpoint}`).catch((err: unknown) => {
      core.log.warn({ id, checkpoint: h.checkpoint, err: errorMessage(err) }, 'checkpoint kept running: the resume failed; the pod stays SUSPENDED');
      return core.o.records.get(id) ?? pod;
    });
  }
  core.log.info({ id, checkpoint: h.checkpoint, bytes: h.bytesDone, uploaded: h.bytesUploaded, volumes: volumes.length, ...t }, 'checkpointed; the pod keeps running');
  const answer = clone(PodInfoSchema, now);
  answer.checkpoint = h.checkpoint;
  return answer;
}

/** Prunes the pod's chunks that no checkpoint needs (checkpoint.ts); a failure is logged, the next prune retries. */
export async function pruneAfter(core: PodCore, id: string, after: string): Promise<void> {
  const store = core.o.objectStore;
  if (!store) return;
  await prunePodChunks(store, id).then(
    (n) => n > 0 && core.log.info({ id, removed: n }, `${after}: chunks no checkpoint needs removed from the object store`),
    (err: unknown) => core.log.warn({ id, err: errorMessage(err) }, `${after}: the pod's unneeded chunks were not removed from the object store`),
  );
}

/**
 * The release that ends a hibernation whose manifest is in the store (the commit point): the pod's
 * local files and its network place go (seed "Addresses": as a delete does), its volumes are
 * CHECKPOINTED, their data in the store alone (seed "Volumes"), the pod is HIBERNATED naming the
 * checkpoint, and its in-flight marker goes. Idempotent: each step finds its work done or does it, so
 * the next feosd runs it again after a kill (src/feos/pods/recovery.ts).
 */
export async function releaseHibernated(core: PodCore, pod: PodInfo, checkpoint: string, memory: boolean, volumes: CheckpointVolume[]): Promise<PodInfo> {
  const o = core.o;
  const id = pod.id;
  await o.vms.delete(id);
  await rm(podDiskPath(core, id), { force: true });
  for (const v of volumes) await o.volumes!.checkpointed(v.volumeId, id, { key: v.key, sizeBytes: v.fileSizeBytes, sha256: v.sha256 });
  if (pod.spec!.network) {
    await o.network.tearDown(pod).catch((err: unknown) => o.log.warn({ id, err: errorMessage(err) }, 'hibernate: network tear-down failed'));
  }
  pod.ipv6Address = '';
  pod.ipv4Address = '';
  pod.checkpoint = checkpoint;
  await core.setState(pod, PodState.HIBERNATED, `hibernated to checkpoint ${checkpoint}${memory ? '' : ' (its disk alone)'}`);
  await removeInFlight(stateDirOf(core), id, 'hibernate');
  return o.records.get(id)!;
}

/**
 * A HIBERNATED pod's checkpoint leaves the object store (its delete), unless a restore claimed it
 * (the pod lives on elsewhere). Failures are logged: the record's removal goes on.
 */
export async function dropCheckpoint(core: PodCore, pod: PodInfo): Promise<void> {
  const store = core.o.objectStore;
  if (!store || !pod.checkpoint) return;
  try {
    if (await store.exists(checkpointKey(pod.id, pod.checkpoint, 'restored'))) return;
    for (const k of await store.list(`pods/${pod.id}/${pod.checkpoint}`)) await store.delete(k);
    await store.deleteLeftovers?.(`pods/${pod.id}/${pod.checkpoint}`);
  } catch (err: unknown) {
    core.log.warn({ id: pod.id, checkpoint: pod.checkpoint, err: errorMessage(err) }, 'delete: the checkpoint was not removed from the object store');
    return;
  }
  await pruneAfter(core, pod.id, 'delete');
}

/**
 * A deleted pod's claimed checkpoints leave the store: their data went with the restore, and their
 * manifest and claim (`restored`) were kept as history while the pod lived. The manifest goes first, so
 * no restore ever sees a manifest without its claim. A pod HIBERNATED here keeps its own checkpoint's
 * history (another node runs it). Failures are logged.
 */
export async function dropClaimedCheckpoints(core: PodCore, pod: PodInfo): Promise<void> {
  const store = core.o.objectStore;
  if (!store || pod.state === PodState.HIBERNATED) return;
  try {
    const keys = await store.list(`pods/${pod.id}`);
    // A checkpoint kept elsewhere (not restored yet) may be relative to a claimed one: that one's manifest stays.
    const bases = await neededBases(store, pod.id);
    for (const k of keys) {
      const m = /^(pods\/[^/]+\/([^/]+))\/restored$/.exec(k);
      if (!m || bases.has(m[2]!)) continue;
      for (const other of keys.filter((x) => x.startsWith(`${m[1]}/`) && x !== k)) await store.delete(other);
      await store.delete(k);
      await store.deleteLeftovers?.(m[1]);
    }
  } catch (err: unknown) {
    core.log.warn({ id: pod.id, err: errorMessage(err) }, 'delete: its claimed checkpoints were not removed from the object store');
    return;
  }
  await pruneAfter(core, pod.id, 'delete');
}
