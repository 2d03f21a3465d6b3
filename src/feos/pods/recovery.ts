/**
 * What a feosd finds at its start of the hibernations and restores that a kill cut (seed 000, "A pod":
 * Hibernate and Restore, whose manifest is the commit point and whose claim is restored once; and the
 * "takeover" of a node's microVMs after a restart). Runs before the pods are taken over and before any
 * resume after a stop, so that no pod resumes on the node while its whole checkpoint waits in the store.
 *
 * - A hibernation (marker `in-flight/<id>.hibernate`) whose manifest is in the store is finished: the
 *   pod ends HIBERNATED, its local files gone (the release is idempotent). One without a manifest is
 *   withdrawn: its uploads leave the store, and the pod stays on the node as its microVM is.
 * - A restore (marker `in-flight/<id>.restore`) whose claim carries the marker's token won the
 *   checkpoint: its files take their places and the pod is RUNNING when its QEMU runs, SUSPENDED when
 *   its microVM holds the snapshot, else FAILED with its disk (StartPod boots it); the checkpoint's data
 *   leave the store. Without the claim, its copies are removed and the pod is as it was.
 * - Then every `*.restore` copy left in the disks' and volumes' dirs goes (no restore runs at start).
 *
 * A marker whose store does not answer is kept for the next start, and logged; such a hibernation's pod
 * does not resume on the node meanwhile (`PodCore.unsettled`: ResumePod and StartPod are
 * FAILED_PRECONDITION), since its checkpoint may be whole.
 */
import { existsSync } from 'node:fs';
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { timestampNow } from '@bufbuild/protobuf/wkt';
import { type PodInfo, PodInfoSchema, PodState } from '../gen/feos/pod/v1/pod_pb.js';
import { MicroVmState } from '../gen/feos/microvm/v1/microvm_pb.js';
import { asFeosError, errorMessage, FeosError } from '../api/index.ts';
import { vmPaths } from '../microvm/index.ts';
import { normalizeSpec } from './spec.ts';
import { POD_RECORD_VERSION } from './records.ts';
import { checkpointKey, readManifest, restoredCreatedAt, volumeKey, type CheckpointManifest } from './checkpoint.ts';
import type { PodCore } from './core.ts';
import { pruneAfter, releaseHibernated, stateDirOf } from './hibernate.ts';
import { type InFlight, readInFlight, removeInFlight } from './in-flight.ts';
import { dropClaimedData, placeRestoredFiles, restoreTempPaths } from './restore.ts';

/** What the recovery did, pod by pod (for the log and tests). */
export interface RecoveryOutcome {
  id: string;
  kind: InFlight['kind'];
  checkpoint: string;
  /** finished (HIBERNATED / restored), withdrawn (the pod stays), kept (the store did not answer). */
  outcome: 'finished' | 'withdrawn' | 'kept';
  /** The pod's state after it (absent: no record). */
  state?: string;
}

/**
 * Settles every hibernation and restore a kill cut, then removes the restores' leftover copies.
 * Never throws: each failure is logged, and its marker kept.
 */
export async function recoverInFlight(core: PodCore): Promise<RecoveryOutcome[]> {
  const o = core.o;
  const stateDir = stateDirOf(core);
  const out: RecoveryOutcome[] = [];
  let markers: InFlight[] = [];
  try {
    const read = await readInFlight(stateDir);
    markers = read.markers;
    for (const b of read.bad) o.log.error({ file: b.file, why: b.why }, 'recovery: an in-flight marker is not one; left alone');
  } catch (err: unknown) {
    o.log.error({ err: errorMessage(err) }, 'recovery: the in-flight markers cannot be read');
  }
  for (const m of markers) {
    try {
      const r = m.kind === 'hibernate' ? await recoverHibernation(core, m) : await recoverRestore(core, m);
      const state = o.records.get(m.id)?.state;
      out.push({ ...r, state: state === undefined ? undefined : PodState[state] });
      o.log.info({ id: m.id, kind: m.kind, checkpoint: m.checkpoint, outcome: r.outcome, state: state === undefined ? 'gone' : PodState[state] }, 'recovery: a cut hibernation or restore is settled');
    } catch (err: unknown) {
      out.push({ id: m.id, kind: m.kind, checkpoint: m.checkpoint, outcome: 'kept' });
      if (m.kind === 'hibernate') core.unsettled.set(m.id, m.checkpoint);
      o.log.error({ id: m.id, kind: m.kind, checkpoint: m.checkpoint, err: errorMessage(err) }, 'recovery: not settled; the marker is kept for the next start');
    }
  }
  await removeRestoreLeftovers(core);
  return out;
}

async function recoverHibernation(core: PodCore, m: InFlight): Promise<RecoveryOutcome> {
  const o = core.o;
  const store = o.objectStore;
  const base = { id: m.id, kind: m.kind, checkpoint: m.checkpoint };
  if (!store) throw new FeosError('FAILED_PRECONDITION', 'feosd runs without --object-store now: start it with the store the hibernation used');
  let manifest: CheckpointManifest | undefined;
  try {
    manifest = await readManifest(store, m.id, m.checkpoint);
  } catch (err: unknown) {
    // No manifest: the hibernation did not reach its commit point. Anything else: the store must say.
    if (asFeosError(err)?.code !== 'NOT_FOUND') throw err;
  }
  const pod = o.records.get(m.id);
  if (manifest) {
    if (pod && !(pod.state === PodState.HIBERNATED && pod.checkpoint === m.checkpoint)) await releaseHibernated(core, pod, m.checkpoint, manifest.memory, manifest.volumes);
    await removeInFlight(stateDirOf(core), m.id, 'hibernate');
    return { ...base, outcome: 'finished' };
  }
  // Withdrawn: the uploads (whole objects and half ones) leave the store.
  for (const k of await store.list(`pods/${m.id}/${m.checkpoint}`)) await store.delete(k);
  await store.deleteLeftovers?.(`pods/${m.id}/${m.checkpoint}`);
  for (const v of pod?.spec?.volumes ?? []) {
    await store.delete(volumeKey(v.volumeId, m.checkpoint));
    await store.deleteLeftovers?.(`volumes/${v.volumeId}/${m.checkpoint}`);
  }
  await removeInFlight(stateDirOf(core), m.id, 'hibernate');
  // The chunks it uploaded that no checkpoint names.
  await pruneAfter(core, m.id, 'withdrawn hibernation');
  return { ...base, outcome: 'withdrawn' };
}

async function recoverRestore(core: PodCore, m: InFlight): Promise<RecoveryOutcome> {
  const o = core.o;
  const store = o.objectStore;
  const base = { id: m.id, kind: m.kind, checkpoint: m.checkpoint };
  if (!store) throw new FeosError('FAILED_PRECONDITION', 'feosd runs without --object-store now: start it with the store the restore used');
  const tmp = restoreTempPaths(core, m.id);
  let claim: { token?: string } | undefined;
  try {
    claim = JSON.parse(new TextDecoder().decode(await store.getBytes(checkpointKey(m.id, m.checkpoint, 'restored'))));
  } catch (err: unknown) {
    if ((err as Error).name !== 'ObjectNotFoundError' && !(err instanceof SyntaxError)) throw err;
  }
  if (claim?.token !== m.token) {
    // The claim was not won (or another node's): nothing of it is this node's.
    await rm(tmp.disk, { force: true });
    await rm(tmp.memory, { force: true });
    await removeInFlight(stateDirOf(core), m.id, 'restore');
    return { ...base, outcome: 'withdrawn' };
  }
  const manifest = await readManifest(store, m.id, m.checkpoint);
  const existing = o.records.get(m.id);
  const reason = `restored from checkpoint ${m.checkpoint}`;
  const pod: PodInfo =
    existing ??
    create(PodInfoSchema, { id: m.id, spec: normalizeSpec(manifest.spec), state: PodState.STOPPED, createdAt: restoredCreatedAt(manifest), stateChangedAt: timestampNow(), recordVersion: POD_RECORD_VERSION });
  await placeRestoredFiles(core, m.id, manifest, join(o.guestDir, manifest.guestVersion));
  pod.guestVersion = manifest.guestVersion;
  pod.checkpoint = '';
  const vm = o.vms.get(m.id);
  if (vm?.state === MicroVmState.RUNNING) {
    await core.setState(pod, PodState.RUNNING, `${reason} (finished by the next feosd: its microVM runs)`);
  } else if (vm?.state === MicroVmState.SUSPENDED && existsSync(vmPaths(o.vms.dir(m.id)).vmstate)) {
    await core.setState(pod, PodState.SUSPENDED, `${reason} (cut by a stop of feosd before its resume: ResumePod resumes it)`);
  } else {
    if (vm) await o.vms.delete(m.id);
    await core.setState(pod, PodState.FAILED, `${reason}: cut by a stop of feosd before its microVM ran; StartPod boots its disk${existsSync(join(o.disksDir, `${m.id}.qcow2`)) ? '' : ' (its disk is missing)'}`);
  }
  await rm(tmp.memory, { force: true });
  await dropClaimedData(core, m.id, m.checkpoint, manifest);
  await removeInFlight(stateDirOf(core), m.id, 'restore');
  return { ...base, outcome: 'finished' };
}

/** Removes the restores' copies left by a kill (`X.qcow2.restore`, `.X.memory.restore`, volumes' `X.qcow2.restore`). */
async function removeRestoreLeftovers(core: PodCore): Promise<void> {
  const dirs = [core.o.disksDir];
  if (core.o.volumes) dirs.push(core.o.volumes.dir);
  for (const dir of dirs) {
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      continue;
    }
    for (const n of names) {
      if (!n.endsWith('.restore')) continue;
      await rm(join(dir, n), { force: true }).catch(() => {});
      core.o.log.info({ file: join(dir, n) }, 'recovery: a restore copy left by a kill was removed');
    }
  }
}
