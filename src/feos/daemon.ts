/**
 * feosd put together (seed 000, "feosd"): the state dir's lock, the records, the microVM layer, the pod
 * service, and the gRPC server on `<run-dir>/api.sock` (group `feos`, mode 0660, where the group exists)
 * and, with `--tcp`, on TCP; READY=1 to $NOTIFY_SOCKET once bound.
 *
 * `startFeosd` runs its steps in order: checkedOptions, takeState (dirs and lock), startMicroVms,
 * startNetwork, startPods, createServer (the services), serve (the socket and TCP), then the resumes of a
 * previous stop; `closeFeosd` undoes them. ./host-setup.ts has what they need of the host.
 */
import { chmodSync, chownSync, closeSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { GenService } from '@bufbuild/protobuf/codegenv2';
import { HostService as HostServiceDesc } from './gen/feos/host/v1/host_pb.js';
import { createLogger, type Logger } from '../lib/index.ts';
import { addService, asFeosError, errorMessage, FeosError, type ServiceHandlers } from './api/index.ts';
import { chooseAccelerator, MicroVmService } from './microvm/index.ts';
import { PodRecords, PodService, guestVersions, unavailablePodNetwork, type PodNetworkProvider } from './pods/index.ts';
import { addPodService } from './pod-api.ts';
import { StopRecordKeeper } from './stop.ts';
import { openObjectStore, type ObjectStore } from './store/index.ts';
import { PodState } from './gen/feos/pod/v1/pod_pb.js';
import { FEOSD_VERSION, hostHandlers } from './host/index.ts';
import { VolumeStore, parseVolumeId } from './volumes/index.ts';
import { VolumeService as VolumeServiceDesc } from './gen/feos/volume/v1/volume_pb.js';
import { takeStateLock } from './lock.ts';
import { createNetwork, type ListenFds, type NetworkFlags, type PodNetwork } from './network/index.ts';
import { recordServices, startFleet, type Fleet, type FleetFlags, type ServedService } from './fleet/index.ts';
import { checkTcpAddress, execUpgrade, findGroup, makeDirs, notifyReady, placeFeosd, refuseServedSocket } from './host-setup.ts';

export { checkTcpAddress, handOverVmsOf } from './host-setup.ts';

/** feosd's options (its flags). */
export interface FeosdOptions {
  /** @default "/var/lib/feos" */
  stateDir: string;
  /** @default "/run/feos" */
  runDir: string;
  /** @default "/usr/lib/feos/guest" */
  guestDir: string;
  /** host:port to serve on besides the socket; port 0 asks the OS. */
  tcp?: string;
  selfUpgrade: boolean;
  accelerator: 'auto' | 'kvm' | 'tcg';
  qemu: string;
  /** A cgroup v2 directory for the microVMs' `vms/<id>` (`--vms-cgroup`); feosd moves into the leaf `feosd/` of its own where that is it. */
  vmsCgroup?: string;
  /**
   * The resolver's sockets main() took from systemd's protocol before anything else ran (takeListenFds);
   * undefined = the network takes them itself. A self-upgrade hands them on (execUpgrade).
   */
  listenFds?: ListenFds;
  clockMaxRttMs: number;
  /** How long a boot's guest has to attach (ms); default 60 s under KVM, 180 s under TCG. */
  guestAttachMs?: number;
  /** The pods' network; none = pods with a network are refused. */
  network?: PodNetworkProvider;
  /**
   * The network's flags (`--pod-prefix`, ...). With a pod prefix, feosd runs src/feos/network: its
   * services, and the pods' network as the pod layer's provider.
   */
  networkFlags?: NetworkFlags;
  /** Registries on the node (`host:port`) that every pod reaches through its microVM's link (`--registry-forward`). */
  registryForwards?: string[];
  /** Registries the guest pulls from over plain HTTP (`--insecure-registry`, `host:port`). */
  insecureRegistries?: string[];
  /**
   * Where pods hibernate (`--object-store`): a URL (`file:///path`) or a store; none = HibernatePod and
   * RestorePod are FAILED_PRECONDITION.
   */
  objectStore?: string | ObjectStore;
  /** `--control-plane` and its flags: feosd joins the control plane (seed 000, "The control plane"). */
  fleet?: FleetFlags;
  /**
   * The mesh's flags, with `fleet` (seed 000, "The mesh"): `--mesh-port` (51820), `--mesh-address`,
   * `--mesh-device` (feos-mesh), `--wireguard-go` (wireguard-go, from PATH). Without `--pod-prefix`, the node's /96 of the mesh is its pod prefix.
   */
  mesh?: { port?: number; address?: string; device?: string; implementation?: 'auto' | 'kernel' | 'wireguard-go'; wireguardGo?: string };
  log?: Logger;
}

/** How a feosd stops (seed 000, "Stopping", "Suspend on stop"). */
export interface CloseOptions {
  /** How long the calls in flight may take before they are ended (ms). @default 30000 */
  callsGraceMs?: number;
  /**
   * `--suspend-on-stop`: after the calls, suspend the running pods for the next feosd, four at a time,
   * each recorded in `<state>/suspended-for-stop.json` as soon as it is suspended.
   */
  suspendOnStop?: boolean;
  /** When `--stop-grace` ends (`Date.now()` ms): the suspends give up 10 s before. @default now + 300 s */
  graceEndsAt?: number;
}

/** A running feosd. */
export interface Feosd {
  /** The bound TCP port, with `tcp`. */
  tcpPort?: number;
  socketPath: string;
  pods: PodService;
  /**
   * Stops serving and lets go of the lock (seed "Stopping", without a control plane; "Suspend on
   * stop"): calls that change a pod are refused at once with UNAVAILABLE "feosd stops", the calls in
   * flight end as they do for up to `callsGraceMs`, then the rest are cancelled. The resumes of a
   * previous stop's pods start no more, and those not tried stay recorded. With `suspendOnStop`, the
   * running pods are then suspended for the next feosd; without, the microVMs run on.
   */
  close(options?: CloseOptions): Promise<void>;
  /** The resumes of the pods a previous stop recorded; resolves once they ended (or none). */
  resumesAfterStop: Promise<void>;
}

/** The accelerator microVMs boot with. */
type Accelerator = 'kvm' | 'tcg';

/**
 * The flags checked before anything is taken, and the directories made absolute: they end up in qcow2
 * backing files, QEMU's arguments and records.
 * @throws Error naming an empty directory flag, or a `--tcp` not of the form host:port
 */
function checkedOptions(opts: FeosdOptions): FeosdOptions {
  // An empty flag would resolve to the working directory.
  for (const [flag, v] of [
    ['--state-dir', opts.stateDir],
    ['--run-dir', opts.runDir],
    ['--guest-dir', opts.guestDir],
  ] as const) {
    if (!v.trim()) throw new Error(`${flag} is empty: want a directory`);
  }
  if (opts.tcp !== undefined) checkTcpAddress(opts.tcp);
  return { ...opts, stateDir: resolve(opts.stateDir), runDir: resolve(opts.runDir), guestDir: resolve(opts.guestDir) };
}

/**
 * The state and run dirs made (the state dir 0700), and the state dir's lock taken (waiting for a
 * previous feosd to let go of it, until `signal` aborts).
 * @returns the lock's file descriptor: closing it lets go
 */
async function takeState(o: FeosdOptions, log: Logger, signal?: AbortSignal): Promise<number> {
  await makeDirs('--state-dir', o.stateDir, 0o700);
  await makeDirs('--run-dir', o.runDir);
  return takeStateLock(join(o.stateDir, 'feosd.lock'), log, signal);
}

/** The microVM layer: the guests installed, the accelerator chosen (a probe with the newest guest's kernel), the microVMs found. */
async function startMicroVms(o: FeosdOptions, log: Logger): Promise<{ vms: MicroVmService; accelerator: Accelerator }> {
  const versions = guestVersions(o.guestDir);
  const kernel = versions.length > 0 ? join(o.guestDir, versions.at(-1)!, 'vmlinuz') : undefined;
  const accelerator = await chooseAccelerator(o.accelerator, o.stateDir, o.qemu, kernel);
  log.info({ accelerator, guests: versions }, 'feosd starting');
  if (versions.length === 0) {
    log.warn({ guestDir: o.guestDir }, `no guest installed in ${o.guestDir}: every bring-up will fail until one is (scripts/build-guest.sh ${o.guestDir})`);
  }
  // feosd into its leaf cgroup, or the microVMs of a feosd from before --vms-cgroup handed over.
  if (o.vmsCgroup) await placeFeosd(o.vmsCgroup, log);
  const vms = new MicroVmService({ vmsDir: join(o.stateDir, 'vms'), qemu: o.qemu, accelerator, log, cgroup: o.vmsCgroup });
  await vms.init();
  return { vms, accelerator };
}

/**
 * The pods' network: with `--pod-prefix` (and no provider given), src/feos/network started with the
 * recorded pods' addresses (a changed address is saved in the pod's record); else the provider given,
 * or none (pods with a network are refused).
 */
async function startNetwork(o: FeosdOptions, records: PodRecords, log: Logger): Promise<{ network?: PodNetwork; provider: PodNetworkProvider }> {
  // A node of a control plane without --pod-prefix takes a /96 of its cluster's mesh.
  if (o.network || (!o.networkFlags?.podPrefix && !o.fleet)) return { provider: o.network ?? unavailablePodNetwork };
  const saveAddresses = async (addresses: Map<string, { ipv6?: string; ipv4?: string }>) => {
    for (const [id, a] of addresses) {
      const p = records.get(id);
      if (p && (p.ipv6Address !== (a.ipv6 ?? '') || p.ipv4Address !== (a.ipv4 ?? ''))) {
        p.ipv6Address = a.ipv6 ?? '';
        p.ipv4Address = a.ipv4 ?? '';
        await records.save(p);
      }
    }
  };
  const network = createNetwork({
    stateDir: o.stateDir,
    log,
    ...o.networkFlags,
    listenFds: o.listenFds ?? true,
    mesh: o.fleet ? { nodeDir: o.fleet.nodeDir, log, ...o.mesh } : undefined,
    onLateStart: (addresses) => {
      saveAddresses(addresses).catch((err: unknown) => log.error({ err: errorMessage(err) }, "the pods' addresses could not be recorded"));
      if (network.unavailableReason) log.error({ reason: network.unavailableReason }, "the pods' network is not up; pods with a network fail");
      else log.info("the pods' network is up on the mesh's /96");
    },
  });
  const kept = records
    .list()
    // A hibernated pod has no place on the network until it is restored.
    .filter((p) => p.spec?.network && p.state !== PodState.HIBERNATED)
    .map((p) => ({
      id: p.id,
      network: { ...p.spec!.network!, metadata: p.spec!.metadata },
      ipv6: p.ipv6Address || undefined,
      ipv4: p.ipv4Address || undefined,
    }));
  await saveAddresses(await network.start(kept));
  const provider = { ...network.podNetworkProvider(), detach: (pod: { id: string }) => network.detachPod(pod.id) };
  if (network.unavailableReason) log.error({ reason: network.unavailableReason }, "the pods' network is not up; pods with a network fail");
  return { network, provider };
}

/** What the pod service stands on. */
interface PodParts {
  records: PodRecords;
  vms: MicroVmService;
  volumes: VolumeStore;
  provider: PodNetworkProvider;
  accelerator: Accelerator;
  objectStore?: ObjectStore;
}

/** The pod service on its parts, its pods taken over (PodService.init). */
async function startPods(o: FeosdOptions, parts: PodParts, log: Logger): Promise<PodService> {
  const pods = new PodService({
    records: parts.records,
    vms: parts.vms,
    volumes: parts.volumes,
    network: parts.provider,
    guestDir: o.guestDir,
    disksDir: join(o.stateDir, 'disks'),
    log,
    clockMaxRttMs: o.clockMaxRttMs,
    // TCG runs the guest about ten times slower than KVM, and Node's start in the guest with it.
    guestAttachMs: o.guestAttachMs ?? (parts.accelerator === 'kvm' ? 60_000 : 180_000),
    registryForwards: o.registryForwards,
    insecureRegistries: o.insecureRegistries,
    objectStore: parts.objectStore,
  });
  await pods.init();
  return pods;
}

/** The methods of feos.volume.v1.VolumeService. */
type VolumeMethods = typeof VolumeServiceDesc extends GenService<infer T> ? T : never;

/** feos.volume.v1.VolumeService: the volume store's records; a deleted CHECKPOINTED volume's data leave the object store. */
function volumeHandlers(volumes: VolumeStore, objectStore: ObjectStore | undefined, log: Logger): ServiceHandlers<VolumeMethods> {
  return {
    createVolume: async (req) => ({ volume: await volumes.create(req.id, req.sizeBytes, req.labels) }),
    getVolume: async (req) => {
      const v = volumes.get(parseVolumeId(req.id));
      if (!v) throw new FeosError('NOT_FOUND', `volume ${req.id} not found`);
      return { volume: v };
    },
    listVolumes: async () => ({ volumes: volumes.list() }),
    deleteVolume: async (req) => {
      const gone = await volumes.delete(req.id);
      // A CHECKPOINTED volume's data leave the object store with it.
      if (gone.checkpointKey && objectStore) {
        await objectStore.delete(gone.checkpointKey).catch((err: unknown) => log.warn({ volume: gone.id, err: errorMessage(err) }, 'delete volume: its checkpoint was not removed'));
      }
      return {};
    },
  };
}

/** What the gRPC server serves. */
interface ServerParts extends PodParts {
  pods: PodService;
  network?: PodNetwork;
  startedAt: number;
}

/**
 * The gRPC server with feosd's services (pods, volumes, the network's, the host), not yet bound.
 * `stopping` aborted refuses the calls that change a pod and ends the watches; `cancelling` aborted ends
 * the streams still running; both with UNAVAILABLE "feosd stops".
 */
function createServer(
  o: FeosdOptions,
  parts: ServerParts,
  log: Logger,
): { server: grpc.Server; served: ServedService[]; stopping: AbortController; cancelling: AbortController; fleet: { current?: Fleet } } {
  const { pods, vms, volumes, network, objectStore, accelerator } = parts;
  const server = new grpc.Server({ 'grpc.max_receive_message_length': 512 * 1024 * 1024 });
  // The services it serves, for the node connections to serve too (src/feos/fleet).
  const served = recordServices(server);
  const fleet: { current?: Fleet } = {};
  // close() aborts `stopping` at once (calls that change a pod are refused, watches end) and `cancelling`
  // when the calls' grace is over (the streams still running end); both with UNAVAILABLE "feosd stops".
  const stopping = new AbortController();
  const cancelling = new AbortController();
  const onError = (method: string, err: unknown) => {
    const known = asFeosError(err);
    if (known) log.debug({ method, code: known.code, err: known.message }, 'call failed');
    else log.error({ method, err: errorMessage(err) }, 'call failed');
  };
  addPodService(server, { pods, stopping: stopping.signal, cancelling: cancelling.signal, onError });
  addService(server, VolumeServiceDesc, volumeHandlers(volumes, objectStore, log), onError);
  for (const svc of network?.grpcServices({ stopping: stopping.signal }) ?? []) server.addService(svc.definition, svc.implementation);
  addService(
    server,
    HostServiceDesc,
    hostHandlers({
      guestDir: o.guestDir,
      stateDir: o.stateDir,
      accelerator: () => accelerator,
      selfUpgrade: o.selfUpgrade,
      startedAt: parts.startedAt,
      exec: (path) => {
        log.info({ path }, 'self-upgrade: exec');
        // The control plane hears of the upgrade first (its Upgrading event).
        void (fleet.current?.upgrading(path) ?? Promise.resolve()).finally(() => {
          vms.closeAll();
          // The same pid, and the resolver's sockets handed on (seed "DNS"; execUpgrade says how).
          execUpgrade([path, ...process.argv.slice(2)], o.listenFds, log);
        });
      },
    }),
    onError,
  );
  return { server, served, stopping, cancelling, fleet };
}

/**
 * Binds `server` to `socketPath` (another feosd's socket refused; group `feos` and 0660 where the group
 * exists, else 0600) and to `tcp`. On a failure nothing of it stays: the server is shut down and the
 * socket removed.
 * @returns the bound TCP port, with `tcp`
 * @throws Error "bind TARGET: ...", or "another feosd serves ..."
 */
async function serve(server: grpc.Server, socketPath: string, tcp: string | undefined): Promise<number | undefined> {
  const bind = (target: string) =>
    new Promise<number>((resolve, reject) =>
      server.bindAsync(target, grpc.ServerCredentials.createInsecure(), (err, port) =>
        err ? reject(new Error(`bind ${target}: ${err.message}`, { cause: err })) : resolve(port),
      ),
    );
  let socketBound = false;
  try {
    await refuseServedSocket(socketPath);
    await rm(socketPath, { force: true });
    await bind(`unix:${socketPath}`);
    socketBound = true;
    const gid = findGroup('feos');
    if (gid !== undefined) {
      chownSync(socketPath, 0, gid);
      chmodSync(socketPath, 0o660);
    } else chmodSync(socketPath, 0o600);
    return tcp ? await bind(tcp) : undefined;
  } catch (err: unknown) {
    server.forceShutdown();
    if (socketBound) await rm(socketPath, { force: true });
    throw err;
  }
}

/** What a running feosd lets go of when it stops. */
interface Running {
  server: grpc.Server;
  stopping: AbortController;
  cancelling: AbortController;
  stopRecord: StopRecordKeeper;
  fleet?: Fleet;
  pods: PodService;
  network?: PodNetwork;
  vms: MicroVmService;
  lockFd: number;
  log: Logger;
}

/** Feosd.close for `r`: see there. Letting go of the lock happens once. */
function closeFeosd(r: Running): Feosd['close'] {
  const { server, stopping, cancelling, stopRecord, fleet, pods, network, vms, lockFd, log } = r;
  let lockHeld = true;
  return async ({ callsGraceMs = 30_000, suspendOnStop = false, graceEndsAt = Date.now() + 300_000 }: CloseOptions = {}) => {
    // With a control plane: Stopping, GOAWAY, the node connections' calls (seed "Stopping"); with
    // --suspend-on-stop after the refusal of the calls that change a pod ("Suspend on stop" 1, 2).
    if (!suspendOnStop) await fleet?.stop(callsGraceMs);
    stopping.abort();
    if (suspendOnStop) await fleet?.stop(callsGraceMs);
    // After the grace, the streams still running end with UNAVAILABLE; a second later whatever is left
    // (unary calls, clients that keep their connection) is cut.
    let cut: NodeJS.Timeout | undefined;
    const force = setTimeout(() => {
      log.warn({ graceMs: callsGraceMs }, 'feosd stops: the calls still running are ended');
      cancelling.abort();
      cut = setTimeout(() => server.forceShutdown(), 1000);
    }, callsGraceMs);
    await new Promise<void>((r) => server.tryShutdown(() => r()));
    clearTimeout(force);
    clearTimeout(cut);
    // The resumes in flight end, the pods not tried stay recorded; with --suspend-on-stop the running
    // pods are suspended for the next feosd.
    await stopRecord.stop(suspendOnStop, graceEndsAt);
    pods.close();
    await network?.stop();
    vms.closeAll();
    if (lockHeld) {
      closeSync(lockFd);
      lockHeld = false;
    }
  };
}

/**
 * Starts feosd: waits for the state dir's lock, loads the records, takes the microVMs and pods over,
 * and serves.
 * @throws Error naming the step (lock, records, bind) when feosd cannot start
 */
export async function startFeosd(opts: FeosdOptions, signal?: AbortSignal): Promise<Feosd> {
  const o = checkedOptions(opts);
  const log = o.log ?? createLogger('feosd');
  const lockFd = await takeState(o, log, signal);
  const startedAt = Date.now();
  const { vms, accelerator } = await startMicroVms(o, log);
  const records = new PodRecords(join(o.stateDir, 'pods'), log);
  await records.load();
  const { network, provider } = await startNetwork(o, records, log);
  const objectStore = typeof o.objectStore === 'string' ? openObjectStore(o.objectStore) : o.objectStore;
  const volumes = new VolumeStore(join(o.stateDir, 'volumes'), log);
  await volumes.load();
  const parts = { records, vms, volumes, provider, accelerator, objectStore };
  const pods = await startPods(o, parts, log);
  const { server, served, stopping, cancelling, fleet: fleetRef } = createServer(o, { ...parts, pods, network, startedAt }, log);

  const socketPath = join(o.runDir, 'api.sock');
  let tcpPort: number | undefined;
  try {
    tcpPort = await serve(server, socketPath, o.tcp);
  } catch (err: unknown) {
    // Nothing stays behind: no socket of ours, no lock, no services.
    pods.close();
    await network?.stop();
    vms.closeAll();
    closeSync(lockFd);
    throw err;
  }
  log.info({ socket: socketPath, tcpPort }, 'feosd serving');
  // An object store that does not answer, or refuses feosd, is said now rather than at the first hibernation.
  if (objectStore) {
    void objectStore.list('pods').then(
      () => log.info({ objectStore: objectStore.url }, 'the object store answers'),
      (err: unknown) => log.warn({ objectStore: objectStore.url, err: errorMessage(err) }, 'the object store did not answer a listing: pods will not hibernate or restore until it does'),
    );
  }
  notifyReady(log);

  // Suspend on stop: the pods a stop before suspended are resumed (seed 000, "Suspend on stop").
  const stopRecord = new StopRecordKeeper(o.stateDir, pods, log);
  stopRecord.startResumes(stopping.signal);
  // The control plane: the join and the connections once the resumes are done (seed "Suspend on stop").
  const fleet = o.fleet && startFleet(o.fleet, { services: served, pods, accelerator, guestVersions: () => guestVersions(o.guestDir), version: FEOSD_VERSION, log, startAfter: stopRecord.resumes, mesh: network?.mesh });
  fleetRef.current = fleet;

  return {
    tcpPort,
    socketPath,
    pods,
    resumesAfterStop: stopRecord.resumes,
    close: closeFeosd({ server, stopping, cancelling, stopRecord, fleet, pods, network, vms, lockFd, log }),
  };
}
