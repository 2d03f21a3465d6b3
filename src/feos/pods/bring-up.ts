/**
 * A pod's bring-up (seed 000, "A pod": Create, Start): its guest version, disk, network, microVM,
 * guest, volumes and containers, in order. Each step looks at what is there first, so a bring-up that
 * a restart of feosd cut off is taken up again where it ended.
 */
import { existsSync } from 'node:fs';
import { mkdir, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { DiskOriginSchema, type PodInfo, PodState } from '../gen/feos/pod/v1/pod_pb.js';
import { MicroVmState } from '../gen/feos/microvm/v1/microvm_pb.js';
import { errorMessage, FeosError } from '../api/index.ts';
import { VolumeState } from '../gen/feos/volume/v1/volume_pb.js';
import { fetchVerified } from './checkpoint.ts';
import { vmPaths } from '../microvm/index.ts';
import { guestRegistryEndpoints } from './registries.ts';
import { attachFailureHint } from './console.ts';
import { mke2fsTimeoutMs } from '../guest/index.ts';
import { parseImageRef } from '../guest/index.ts';
import type { PodNetworkAttachment } from './network.ts';
import { guestVersions } from './guests.ts';
import { CONTAINER_CREATE_MS, CONTAINER_START_MS, GUEST_ATTACH_MS } from './actions.ts';
import type { Entry, PodCore } from './core.ts';
import { bakePoint, makePodDisk } from './baked.ts';

/** Queues the bring-up behind the pod's lock (a create's answer goes first); failures are logged. */
export function startBringUp(core: PodCore, id: string, entry: Entry): Promise<void> {
  const ac = new AbortController();
  entry.bringUp = ac;
  return core
    .locked(id, async (pod) => {
      if (pod.state !== PodState.PENDING || ac.signal.aborted) return;
      await bringUp(core, pod, ac.signal);
    })
    .catch((err: unknown) => core.log.error({ id, err: errorMessage(err) }, 'bring-up'))
    .finally(() => {
      if (entry.bringUp === ac) entry.bringUp = undefined;
    });
}

/** The pod's disk: `<disks>/<id>.qcow2`. */
export function podDiskPath(core: PodCore, id: string): string {
  return join(core.o.disksDir, `${id}.qcow2`);
}

/**
 * Brings a PENDING pod up; each step looks at what is there first. Ends RUNNING, or FAILED with
 * `<step>: <reason>` (its microVM ended). Runs under the pod's lock.
 */
export async function bringUp(core: PodCore, pod: PodInfo, signal: AbortSignal): Promise<void> {
  const o = core.o;
  const id = pod.id;
  let step = 'guest';
  // The bring-up takes the pod's pull token: it is this bring-up's alone.
  const pullToken = core.pullTokens.get(id) ?? '';
  core.pullTokens.delete(id);
  try {
    if (!pod.guestVersion || !existsSync(join(o.guestDir, pod.guestVersion))) {
      const versions = guestVersions(o.guestDir);
      if (versions.length === 0) throw new Error(`no guest installed in ${o.guestDir} (scripts/build-guest.sh)`);
      pod.guestVersion = versions.at(-1)!;
      await core.save(pod);
    }
    step = 'disk';
    const disk = podDiskPath(core, id);
    if (!existsSync(disk)) {
      await mkdir(o.disksDir, { recursive: true });
      const tmp = `${disk}.tmp`;
      // On a baked layer the create named, else on the blank data volume (seed "Baked images"); the
      // record says which before the disk is there, so that a disk is never without its origin.
      const made = await makePodDisk(core, pod, tmp);
      pod.disk = create(DiskOriginSchema, { layer: made.layer, passedOver: made.passedOver });
      await core.save(pod);
      await rename(tmp, disk);
    }
    step = 'network';
    let net: PodNetworkAttachment | undefined;
    if (pod.spec!.network) {
      net = await o.network.setUp(pod);
      if (pod.ipv6Address !== net.ipv6Address || pod.ipv4Address !== net.ipv4Address) {
        pod.ipv6Address = net.ipv6Address;
        pod.ipv4Address = net.ipv4Address;
        await core.save(pod);
      }
    }
    signal.throwIfAborted();
    step = 'microVM';
    let vm = o.vms.get(id);
    if (vm && vm.guestVersion !== pod.guestVersion) {
      await o.vms.delete(id);
      vm = undefined;
    }
    step = 'volumes: open from their checkpoint';
    await openCheckpointedVolumes(core, pod);
    step = 'microVM';
    if (!vm) await createMicroVm(core, pod, net);
    else for (const v of pod.spec!.volumes) await o.volumes!.ensureDisk(v.volumeId);
    if (o.vms.get(id)!.state !== MicroVmState.RUNNING) await o.vms.start(id);
    signal.throwIfAborted();
    step = 'guest attach';
    await core.pushAfterAttach(pod, o.guestAttachMs ?? GUEST_ATTACH_MS, signal, net);
    if (pod.spec!.volumes.length > 0) {
      step = 'volumes';
      await mountVolumes(core, pod);
    }
    const guest = o.vms.guest(id);
    const endpoints = guestRegistryEndpoints(o.registryForwards ?? [], o.insecureRegistries ?? []);
    // A disk made on a baked layer has its image: its guest gets no pull token (seed "Pull tokens").
    const token = pod.disk?.layer ? '' : pullToken;
    if (pod.imageLayers?.bake) {
      step = 'bake';
      await bakePoint(core, pod, { pullToken: token, registryEndpoints: endpoints });
    }
    for (const c of pod.spec!.containers) {
      signal.throwIfAborted();
      step = `container ${c.name}: create`;
      await guest.call(
        'CreateContainer',
        {
          config: { name: c.name, image: c.image, command: c.command, args: c.args, env: c.env, volumeMounts: c.volumeMounts.map((m) => ({ name: m.name, path: m.path, readOnly: m.readOnly })) },
          pullToken: token,
          registryEndpoints: endpoints,
        },
        CONTAINER_CREATE_MS,
      );
      step = `container ${c.name}: start`;
      await guest.call('StartContainer', { name: c.name }, CONTAINER_START_MS);
    }
    signal.throwIfAborted();
    await core.setState(pod, PodState.RUNNING, 'booted');
  } catch (err: unknown) {
    if (signal.aborted) return;
    let reason = `${step}: ${errorMessage(err)}`;
    // A guest that did not attach says why on its console alone (the agent killed for lack of memory).
    if (step === 'guest attach') reason += await attachFailureHint(vmPaths(o.vms.dir(id)).serialLog, o.vms.accelerator);
    else if (step.endsWith(': create') && !pod.spec!.network) reason += unforwardedHint(pod, step, o.registryForwards ?? []);
    await o.vms.kill(id, `bring-up failed: ${reason}`).catch(() => {});
    await core.detach(pod);
    await core.setState(pod, PodState.FAILED, reason);
  }
}

/**
 * For a container's create that failed in a pod without a network: when its image's registry is not one
 * feosd forwards (`--registry-forward`), the guest could not reach it (the pull's own error names only
 * an address inside the guest, such as `connect ECONNREFUSED 127.0.0.1:5999`). Else ''.
 */
export function unforwardedHint(pod: PodInfo, step: string, forwards: readonly string[]): string {
  const c = pod.spec!.containers.find((x) => step === `container ${x.name}: create`);
  if (!c) return '';
  let registry: string;
  try {
    registry = parseImageRef(c.image).registry;
  } catch {
    return '';
  }
  if (forwards.includes(registry)) return '';
  return `; a pod without a network reaches only the registries feosd forwards (--registry-forward: ${forwards.join(', ') || 'none'}), not ${registry}`;
}

/**
 * Records the pod's microVM (CREATED): its guest version, disk, vCPUs, memory, TAP device, volumes'
 * disks (made at their first boot) and registry link, which a snapshot's devices must match.
 */
export async function createMicroVm(core: PodCore, pod: PodInfo, net: PodNetworkAttachment | undefined): Promise<void> {
  const o = core.o;
  const volumeDisks: string[] = [];
  for (const v of pod.spec!.volumes) volumeDisks.push(await o.volumes!.ensureDisk(v.volumeId));
  await o.vms.create({
    id: pod.id,
    guestVersion: pod.guestVersion,
    guestDir: join(o.guestDir, pod.guestVersion),
    disk: podDiskPath(core, pod.id),
    vcpus: pod.spec!.vcpus,
    memoryBytes: pod.spec!.memoryBytes,
    tap: net ? { name: net.tap, mac: net.mac } : undefined,
    volumes: volumeDisks,
    registryForwards: o.registryForwards,
  });
}

/**
 * Opens the pod's CHECKPOINTED volumes from the object store (seed "Volumes": the next boot of a pod
 * with one opens it from its checkpoint): each disk is copied and checked against the record's size
 * and SHA-256, then the volume is ATTACHED again.
 * @throws FeosError FAILED_PRECONDITION without an object store, DATA_LOSS when the object is missing or
 *   differs, UNAVAILABLE when the store fails
 */
async function openCheckpointedVolumes(core: PodCore, pod: PodInfo): Promise<void> {
  const o = core.o;
  for (const v of pod.spec!.volumes) {
    const rec = o.volumes!.get(v.volumeId);
    if (rec?.state !== VolumeState.CHECKPOINTED) continue;
    if (!o.objectStore) throw new FeosError('FAILED_PRECONDITION', `volume ${v.volumeId} is CHECKPOINTED and feosd has no object store (--object-store)`);
    const disk = o.volumes!.diskPath(v.volumeId);
    await fetchVerified(o.objectStore, { key: rec.checkpointKey, sizeBytes: Number(rec.checkpointSizeBytes), sha256: rec.checkpointSha256 }, `${disk}.restore`, `volume ${v.volumeId}`);
    await rename(`${disk}.restore`, disk);
    await o.volumes!.opened(v.volumeId, pod.id);
    await o.objectStore.delete(rec.checkpointKey).catch((err: unknown) => core.log.warn({ volume: v.volumeId, err: errorMessage(err) }, 'volume: its checkpoint was not removed'));
    core.log.info({ id: pod.id, volume: v.volumeId, from: rec.checkpointKey }, 'volume opened from its checkpoint');
  }
}

/** MountVolumes with each volume's name, ID, drive, size and whether to format it; records the mounted as formatted. */
async function mountVolumes(core: PodCore, pod: PodInfo): Promise<void> {
  const store = core.o.volumes!;
  const volumes = pod.spec!.volumes.map((v, i) => {
    const rec = store.get(v.volumeId);
    if (!rec) throw new Error(`volume ${v.volumeId} is not on the node`);
    return { name: v.name, id: v.volumeId, drive: i + 1, sizeBytes: rec.sizeBytes, format: !rec.formatted };
  });
  // The guest formats each new volume in turn: 180 s, and its format's time a TiB (volume-format.ts).
  const formatMs = volumes.filter((v) => v.format).reduce((ms, v) => ms + mke2fsTimeoutMs(Number(v.sizeBytes)) - 120_000, 0);
  const res = await core.o.vms.guest(pod.id).call('MountVolumes', { volumes }, 180_000 + formatMs);
  const mounted = new Set(res.mounted);
  await store.markFormatted(volumes.filter((v) => mounted.has(v.name)).map((v) => v.id));
  const failed = Object.entries(res.failed);
  if (failed.length > 0) throw new Error(failed.map(([n, why]) => `${n}: ${why}`).join('; '));
}
