/**
 * RestorePod, and ResumePod of a HIBERNATED pod (seed 000, "A pod": Hibernate and Restore): brings a
 * pod back from its checkpoint in the object store, on the node that hibernated it or on another feosd
 * with the same store, with its memory (a resume: its guest's uptime goes on) or, when asked or when
 * the checkpoint has none, on its disk alone (a fresh boot).
 *
 * Steps: the manifest is read and checked; the disk (and memory, and the volumes' disks) are copied and checked against its
 * sizes and SHA-256s; the checkpoint is claimed (`restored`, which one restore alone wins: a snapshot
 * is resumed once); the disk is rebased on the local guest version's blank data volume; the pod is
 * recorded, its volumes ATTACHED to it again (recorded anew on a node that did not have them); its
 * microVM is made, given the memory and resumed, or its bring-up boots it. Until the
 * claim, a failure leaves nothing behind: no local file, the record (if any) HIBERNATED as it was,
 * the store untouched. After it, a resume that fails before the vCPUs run leaves the pod SUSPENDED with
 * the checkpoint's memory as its snapshot (ResumePod resumes it); another failure leaves it FAILED with
 * its disk, which StartPod boots. The pod keeps its creation time (the manifest's `podCreatedAt`).
 */
import { existsSync } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { create } from '@bufbuild/protobuf';
import { timestampNow } from '@bufbuild/protobuf/wkt';
import { type PodInfo, PodInfoSchema, PodState } from '../gen/feos/pod/v1/pod_pb.js';
import { VolumeState } from '../gen/feos/volume/v1/volume_pb.js';
import { MicroVmState } from '../gen/feos/microvm/v1/microvm_pb.js';
import { asFeosError, errorMessage, FeosError } from '../api/index.ts';
import { storeFailureCode } from '../store/index.ts';
import { normalizeSpec } from './spec.ts';
import { POD_RECORD_VERSION } from './records.ts';
import type { PodNetworkAttachment } from './network.ts';
import { createMicroVm, podDiskPath, startBringUp } from './bring-up.ts';
import { type CheckpointManifest, checkpointKey, chunkPrefix, DISK_FILE, packPrefix, fetchVerified, listCheckpoints, MEMORY_FILE, parseCheckpointName, readManifest, restoredCreatedAt } from './checkpoint.ts';
import { stateDirOf } from './hibernate.ts';
import { removeInFlight, writeInFlight } from './in-flight.ts';
import { randomBytes } from 'node:crypto';
import type { PodCore } from './core.ts';
import { resumeLocked } from './lifecycle.ts';

const run = promisify(execFile);

/** What a restore is asked. */
export interface RestoreRequest {
  /** A checkpoint of the pod; empty: the HIBERNATED pod's own, or the latest in the store. */
  checkpoint?: string;
  /** A fresh boot on the checkpoint's disk, without its memory. */
  diskOnly?: boolean;
}

/**
 * Restores a pod from its checkpoint (a HIBERNATED pod of this node, or a pod the node does not have).
 * Answers once the pod is RUNNING (or FAILED after a disk-only boot).
 * @throws FeosError FAILED_PRECONDITION (no object store; the pod is on the node and not HIBERNATED; the
 *   checkpoint was restored already; its guest version is not installed; its network cannot be made),
 *   NOT_FOUND (no such checkpoint), DATA_LOSS (a manifest that is not one, a file that differs from it),
 *   UNAVAILABLE (the store failed), INTERNAL (the resume failed: the pod is SUSPENDED with its snapshot
 *   when its vCPUs had not run, else FAILED with its disk)
 */
export async function restorePod(core: PodCore, id: string, req: RestoreRequest): Promise<PodInfo> {
  if (!core.o.objectStore) throw new FeosError('FAILED_PRECONDITION', 'feosd has no object store: pods do not restore (start it with --object-store s3://BUCKET/PREFIX or file:///path)');
  const checkpoint = req.checkpoint ? parseCheckpointName(req.checkpoint) : undefined;
  // A hibernation in flight ends first (a ResumePod that may abandon it has done so already).
  const h = core.entries.get(id)?.hibernation;
  if (h) await h.done.catch(() => {});
  const entry = core.entry(id);
  const restored = await entry.lock.run(async () => {
    if (core.entries.get(id) !== entry) throw new FeosError('NOT_FOUND', `pod ${id} not found`);
    const existing = core.o.records.get(id);
    try {
      if (existing && existing.state !== PodState.HIBERNATED) {
        throw new FeosError('FAILED_PRECONDITION', `pod ${id} is ${PodState[existing.state]} on this node: only a HIBERNATED pod, or one the node does not have, restores`);
      }
      return await restoreLocked(core, id, existing, checkpoint, req.diskOnly ?? false);
    } finally {
      // A restore that made no record leaves no entry behind.
      if (!core.o.records.get(id) && core.entries.get(id) === entry) core.entries.delete(id);
    }
  });
  if (restored.state === PodState.PENDING) await startBringUp(core, id, entry);
  const pod = core.o.records.get(id);
  if (!pod) throw new FeosError('NOT_FOUND', `pod ${id} not found`);
  return pod;
}

async function restoreLocked(core: PodCore, id: string, existing: PodInfo | undefined, wanted: string | undefined, diskOnly: boolean): Promise<PodInfo> {
  const o = core.o;
  const store = o.objectStore!;
  let checkpoint = wanted ?? existing?.checkpoint;
  if (!checkpoint) {
    let all: string[];
    try {
      all = await listCheckpoints(store, id);
    } catch (err: unknown) {
      throw new FeosError(storeFailureCode(err), `object store: ${errorMessage(err)}; nothing was restored`, { cause: err });
    }
    checkpoint = all.at(-1);
    if (!checkpoint) throw new FeosError('NOT_FOUND', `pod ${id} is not on this node and has no checkpoint in the object store ${store.url}`);
  }
  let m: CheckpointManifest;
  try {
    m = await readManifest(store, id, checkpoint);
  } catch (err: unknown) {
    // The checkpoint this node's record names is gone from the store: not a wrong name, lost data.
    if (!wanted && existing && err instanceof FeosError && err.code === 'NOT_FOUND') {
      throw new FeosError('DATA_LOSS', `pod ${id} is HIBERNATED on this node naming checkpoint ${checkpoint}, and ${err.message}; the pod stays HIBERNATED, nothing was restored`);
    }
    throw err;
  }
  const claimKey = checkpointKey(id, checkpoint, 'restored');
  const restoredAlready = async () => {
    const said = await store.getBytes(claimKey).then(
      (b) => new TextDecoder().decode(b).trim(),
      () => '',
    );
    const stale = existing ? `; this node's HIBERNATED record of the pod is stale (the pod lives where it was restored): remove it with \`feosctl pod delete ${id}\`` : '';
    return new FeosError('FAILED_PRECONDITION', `checkpoint ${checkpoint} of pod ${id} was restored already${said ? ` (${said})` : ''}: a checkpoint is restored once${stale}`);
  };
  let claimed: boolean;
  try {
    claimed = await store.exists(claimKey);
  } catch (err: unknown) {
    throw new FeosError(storeFailureCode(err), `object store: ${errorMessage(err)}; nothing was restored`, { cause: err });
  }
  if (claimed) throw await restoredAlready();
  let spec: PodInfo['spec'];
  try {
    spec = normalizeSpec(m.spec);
  } catch (err: unknown) {
    throw new FeosError('DATA_LOSS', `checkpoint ${checkpoint} of pod ${id}: its manifest's spec: ${errorMessage(err)}; nothing was restored`);
  }
  if (existing) spec = existing.spec!;
  const guestDir = join(o.guestDir, m.guestVersion);
  if (!existsSync(join(guestDir, 'data.qcow2'))) {
    throw new FeosError('FAILED_PRECONDITION', `checkpoint ${checkpoint} of pod ${id} needs guest version ${m.guestVersion}, which is not installed in ${o.guestDir}`);
  }
  // Its volumes come back from the checkpoint: each must be this pod's CHECKPOINTED one, or not on the node.
  for (const v of m.volumes) {
    const rec = o.volumes?.get(v.volumeId);
    if (!o.volumes) throw new FeosError('FAILED_PRECONDITION', `volume ${v.volumeId}: this node has no volumes`);
    if (rec && !(rec.state === VolumeState.CHECKPOINTED && rec.podId === id)) {
      const hint =
        rec.state === VolumeState.CHECKPOINTED
          ? `: its record names an older checkpoint (${rec.checkpointKey}), which a restore elsewhere took; remove the stale record with \`feosctl volume delete ${v.volumeId}\` and restore again`
          : ': detach it from its pod, or delete it, first';
      throw new FeosError('FAILED_PRECONDITION', `volume ${v.volumeId} of checkpoint ${checkpoint} is on this node already (${VolumeState[rec.state]}${rec.podId ? `, pod ${rec.podId}` : ''})${hint}`);
    }
  }
  if (spec!.network) {
    const why = o.network.check(spec!.network);
    if (why) throw new FeosError('FAILED_PRECONDITION', why);
  }
  // Memory admission, before anything is fetched or claimed; held until the pod is recorded PENDING or RUNNING.
  const release = core.memory.admit(id, spec!.memoryBytes, 'RestorePod');
  try {
    return await restoreAdmitted(core, id, existing, checkpoint, m, spec!, diskOnly, restoredAlready);
  } finally {
    release();
  }
}

async function restoreAdmitted(core: PodCore, id: string, existing: PodInfo | undefined, checkpoint: string, m: CheckpointManifest, spec: PodInfo['spec'], diskOnly: boolean, restoredAlready: () => Promise<FeosError>): Promise<PodInfo> {
  const o = core.o;
  const store = o.objectStore!;
  const claimKey = checkpointKey(id, checkpoint, 'restored');
  const guestDir = join(o.guestDir, m.guestVersion);
  const memory = m.memory && !diskOnly;
  const disk = podDiskPath(core, id);
  const tmpDisk = `${disk}.restore`;
  const tmpMemory = join(o.disksDir, `.${id}.memory.restore`);
  const file = (name: string) => {
    const f = m.files.find((x) => x.name === name)!;
    const key = f.packed ? packPrefix(id) : f.chunks ? chunkPrefix(id) : checkpointKey(id, checkpoint, name);
    return { key, sizeBytes: f.sizeBytes, sha256: f.sha256, chunks: f.chunks, packed: f.packed };
  };
  const what = `checkpoint ${checkpoint} of pod ${id}`;
  const tmpVolume = (vid: string) => `${o.volumes!.diskPath(vid)}.restore`;
  await mkdir(o.disksDir, { recursive: true });
  const stateDir = stateDirOf(core);
  const token = randomBytes(8).toString('hex');
  let won = false;
  const f0 = performance.now();
  const timings = { fetchMs: 0, checkMs: 0, syncMs: 0 };
  // feosd's CPU over the copy (its hash workers' included: the process's), less moved by the machine's load than its time.
  const cpu0 = process.cpuUsage();
  let copyCpuMs = 0;
  try {
    await fetchVerified(store, file(DISK_FILE), tmpDisk, what, undefined, timings);
    if (memory) await fetchVerified(store, file(MEMORY_FILE), tmpMemory, what, undefined, timings);
    for (const v of m.volumes) await fetchVerified(store, { key: v.key, sizeBytes: v.fileSizeBytes, sha256: v.sha256 }, tmpVolume(v.volumeId), what);
    const cpu = process.cpuUsage(cpu0);
    copyCpuMs = Math.round((cpu.user + cpu.system) / 1000);
    // A kill after the claim is found by the next feosd, which finishes the restore (recovery.ts).
    try {
      await writeInFlight(stateDir, { id, kind: 'restore', checkpoint, token });
    } catch (err: unknown) {
      throw new FeosError('UNAVAILABLE', `this node's state dir: ${errorMessage(err)}; nothing was restored`, { cause: err });
    }
    const claim = new TextEncoder().encode(`${JSON.stringify({ node: hostname(), stateDir, token, at: new Date().toISOString(), memory })}\n`);
    try {
      won = await store.putIfAbsent(claimKey, claim);
    } catch (err: unknown) {
      throw new FeosError(storeFailureCode(err), `object store ${store.url}: ${errorMessage(err)}`, { cause: err });
    }
    if (!won) throw await restoredAlready();
    await placeRestoredFiles(core, id, m, guestDir);
  } catch (err: unknown) {
    if (!won) {
      await rm(tmpDisk, { force: true });
      await rm(tmpMemory, { force: true });
      for (const v of m.volumes) await rm(tmpVolume(v.volumeId), { force: true });
      await removeInFlight(stateDir, id, 'restore').catch(() => {});
      core.log.warn({ id, checkpoint, err: errorMessage(err) }, 'restore: refused; nothing was restored');
      if (asFeosError(err)) throw err;
      throw new FeosError('INTERNAL', `restore pod ${id}: ${errorMessage(err)}; nothing was restored`, { cause: err });
    }
    // The checkpoint is this node's now: the pod is recorded FAILED with what it has, never lost.
    const pod = existing ?? create(PodInfoSchema, { id, spec, state: PodState.STOPPED, createdAt: restoredCreatedAt(m), stateChangedAt: timestampNow(), recordVersion: POD_RECORD_VERSION });
    pod.guestVersion = m.guestVersion;
    pod.checkpoint = '';
    await rm(tmpMemory, { force: true });
    await core.setState(pod, PodState.FAILED, `restore of checkpoint ${checkpoint}: ${errorMessage(err)}`);
    await removeInFlight(stateDir, id, 'restore').catch(() => {});
    await dropClaimedData(core, id, checkpoint, m);
    throw new FeosError('INTERNAL', `restore pod ${id}: ${errorMessage(err)}; the checkpoint is claimed: the pod is FAILED on this node`, { cause: err });
  }
  const now = timestampNow();
  const pod =
    existing ??
    create(PodInfoSchema, { id, spec, state: PodState.STOPPED, createdAt: restoredCreatedAt(m), stateChangedAt: now, recordVersion: POD_RECORD_VERSION });
  pod.guestVersion = m.guestVersion;
  pod.checkpoint = '';
  pod.ipv6Address = '';
  pod.ipv4Address = '';
  const reason = `restored from checkpoint ${checkpoint}${memory ? '' : ' (its disk alone)'}`;
  core.log.info({ id, checkpoint, memory, from: m.node, allMs: Math.round(performance.now() - f0), fetchMs: Math.round(timings.fetchMs), checkMs: Math.round(timings.checkMs), syncMs: Math.round(timings.syncMs), copyCpuMs }, 'restore');
  try {
    if (o.vms.get(id)) await o.vms.delete(id);
    if (!memory) {
      await rm(tmpMemory, { force: true });
      await core.setState(pod, PodState.PENDING, reason);
    } else {
      await core.setState(pod, PodState.STOPPED, `${reason}: restoring`);
      let net: PodNetworkAttachment | undefined;
      if (spec!.network) {
        net = await o.network.setUp(pod);
        pod.ipv6Address = net.ipv6Address;
        pod.ipv4Address = net.ipv4Address;
      }
      await createMicroVm(core, pod, net);
      await o.vms.adoptSnapshot(id, tmpMemory);
      await core.setState(pod, PodState.SUSPENDED, reason);
      await resumeLocked(core, o.records.get(id)!, false, reason);
    }
  } catch (err: unknown) {
    await rm(tmpMemory, { force: true });
    const p = o.records.get(id) ?? pod;
    // A resume that failed before the vCPUs ran kept the snapshot (the checkpoint's memory, this node's now):
    // the pod stays SUSPENDED with it and the failure as its reason, and the next ResumePod resumes it.
    if (p.state === PodState.SUSPENDED && o.vms.get(id)?.state === MicroVmState.SUSPENDED) throw err;
    if (p.state !== PodState.FAILED) await core.setState(p, PodState.FAILED, `restore: ${errorMessage(err)}`);
    throw asFeosError(err) ? err : new FeosError('INTERNAL', `restore pod ${id}: ${errorMessage(err)}; the pod is FAILED with its disk`, { cause: err });
  } finally {
    await removeInFlight(stateDir, id, 'restore').catch((err: unknown) => core.log.warn({ id, err: errorMessage(err) }, 'restore: its in-flight marker was not removed'));
    await dropClaimedData(core, id, checkpoint, m);
  }
  return o.records.get(id)!;
}

/**
 * Removes a claimed checkpoint's whole objects from the store (they are this node's now): its volumes' disks,
 * and a version 1 checkpoint's memory and disk. Its chunks stay, the base the pod's next hibernation
 * uploads only its changes against (pruned then); its manifest and claim stay as its history until the pod
 * is deleted. Failures are logged.
 */
export async function dropClaimedData(core: PodCore, id: string, checkpoint: string, m: CheckpointManifest): Promise<void> {
  const store = core.o.objectStore!;
  const whole = m.files.filter((f) => !f.chunks && !f.packed).map((f) => checkpointKey(id, checkpoint, f.name));
  for (const key of [...whole, ...m.volumes.map((v) => v.key)]) {
    await store.delete(key).catch((err: unknown) => core.log.warn({ id, checkpoint, key, err: errorMessage(err) }, 'restore: a checkpoint file was not removed'));
  }
}

/** Where a restore copies a pod's disk, memory and a volume's disk before they take their places. */
export function restoreTempPaths(core: PodCore, id: string): { disk: string; memory: string; volume: (volumeId: string) => string } {
  return {
    disk: `${podDiskPath(core, id)}.restore`,
    memory: join(core.o.disksDir, `.${id}.memory.restore`),
    volume: (vid) => `${core.o.volumes!.diskPath(vid)}.restore`,
  };
}

/**
 * After the claim: the copied disk is rebased on this node's blank data volume of the guest version and
 * takes its place, and the volumes' disks take theirs, ATTACHED to the pod (recorded anew on a node that
 * did not have them). Idempotent: a file already in place is left (the next feosd runs it again after a
 * kill, recovery.ts).
 */
export async function placeRestoredFiles(core: PodCore, id: string, m: CheckpointManifest, guestDir: string): Promise<void> {
  const o = core.o;
  const tmp = restoreTempPaths(core, id);
  if (existsSync(tmp.disk)) {
    // The disk names its backing file by path: this node's copy of the guest version's blank volume.
    await run('qemu-img', ['rebase', '-u', '-F', 'qcow2', '-b', join(guestDir, 'data.qcow2'), tmp.disk]);
    await rename(tmp.disk, podDiskPath(core, id));
  }
  for (const v of m.volumes) {
    if (existsSync(tmp.volume(v.volumeId))) await rename(tmp.volume(v.volumeId), o.volumes!.diskPath(v.volumeId));
    const rec = o.volumes!.get(v.volumeId);
    if (rec?.state === VolumeState.ATTACHED && rec.podId === id) continue;
    if (rec) await o.volumes!.opened(v.volumeId, id);
    else await o.volumes!.adopt({ id: v.volumeId, sizeBytes: BigInt(v.sizeBytes), labels: v.labels, formatted: v.formatted }, id);
  }
}
