/**
 * feosd put together (seed 000, "feosd"): the state dir's lock, the records, the microVM layer, the pod
 * service, and the gRPC server on `<run-dir>/api.sock` (group `feos`, mode 0660, where the group exists)
 * and, with `--tcp`, on TCP; READY=1 to $NOTIFY_SOCKET once bound.
 */
import { execFile } from 'node:child_process';
import { chmodSync, chownSync, closeSync, readFileSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import net from 'node:net';
import { dirname, join, resolve } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { HostService as HostServiceDesc } from './gen/feos/host/v1/host_pb.js';
import { makeClient } from './api/index.ts';
import { createLogger, type Logger } from '../lib/index.ts';
import { addService, errorMessage, FeosError } from './api/index.ts';
import { chooseAccelerator, MicroVmService } from './microvm/index.ts';
import { PodRecords, PodService, guestVersions, unavailablePodNetwork, type PodNetworkProvider } from './pods/index.ts';
import { addPodService } from './pod-api.ts';
import { StopRecordKeeper } from './stop.ts';
import { openObjectStore, type ObjectStore } from './store/index.ts';
import { PodState } from './gen/feos/pod/v1/pod_pb.js';
import { hostHandlers } from './host/index.ts';
import { VolumeStore, parseVolumeId } from './volumes/index.ts';
import { VolumeService as VolumeServiceDesc } from './gen/feos/volume/v1/volume_pb.js';
import { takeStateLock } from './lock.ts';
import { createNetwork, type NetworkFlags, type PodNetwork } from './network/index.ts';

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
  /** A cgroup v2 directory for the microVMs' `vms/<id>`. */
  vmsCgroup?: string;
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

function findGroup(name: string): number | undefined {
  try {
    for (const line of readFileSync('/etc/group', 'utf8').split('\n')) {
      const [n, , gid] = line.split(':');
      if (n === name) return Number(gid);
    }
  } catch {}
  return undefined;
}

function notifyReady(log: Logger): void {
  const socket = process.env.NOTIFY_SOCKET;
  if (!socket) return;
  // Node has no unix datagram sockets: systemd-notify sends it for this pid (the unit needs NotifyAccess=all).
  execFile('systemd-notify', ['--ready', `--pid=${process.pid}`], (err) => {
    if (err) log.warn({ err: errorMessage(err) }, 'READY=1: systemd-notify failed');
  });
}

/**
 * `mkdir -p` that ends: Node's recursive mkdir loops forever where a parent refuses new entries with
 * ENOENT (such as /proc). Each missing directory is made on its own; the first error is thrown.
 * @throws Error naming the flag, the directory and the system's error
 */
async function makeDirs(flag: string, dir: string, mode?: number): Promise<void> {
  const missing: string[] = [];
  for (let d = dir; ; d = dirname(d)) {
    try {
      await mkdir(d, { mode });
      break;
    } catch (err: unknown) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EEXIST') break;
      if (code !== 'ENOENT' || dirname(d) === d) throw new Error(`${flag} ${dir}: cannot make ${d}: ${errorMessage(err)}`, { cause: err });
      missing.push(d);
    }
  }
  for (const d of missing.reverse()) {
    try {
      await mkdir(d, { mode });
    } catch (err: unknown) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw new Error(`${flag} ${dir}: cannot make ${d}: ${errorMessage(err)}`, { cause: err });
    }
  }
}

/**
 * Checks `--tcp`'s form before anything is taken: `host:port` or `[v6]:port`, the port 0 to 65535.
 * @throws Error "--tcp X: want host:port ..."
 */
export function checkTcpAddress(address: string): void {
  const m = /^(\[[0-9A-Fa-f:.]+\]|[^:[\]\s]+):(\d{1,5})$/.exec(address);
  if (!m || Number(m[2]) > 65535) throw new Error(`--tcp ${JSON.stringify(address)}: want host:port (such as 127.0.0.1:1337, [::1]:1337; port 0 to 65535, 0 asks the OS)`);
}

/** Whether something accepts connections on a unix socket (a live feosd), within 2 s. */
function socketAnswers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect(path);
    const timer = setTimeout(() => {
      sock.destroy();
      resolve(true);
    }, 2000);
    sock.once('connect', () => {
      clearTimeout(timer);
      sock.destroy();
      resolve(true);
    });
    sock.once('error', () => {
      clearTimeout(timer);
      resolve(false);
    });
  });
}

/**
 * Refuses a run dir whose api.sock another feosd serves (another --state-dir, the same --run-dir): its
 * socket would be taken over and, at this one's exit, removed.
 * @throws Error "another feosd serves RUN/api.sock, pid N"
 */
async function refuseServedSocket(socketPath: string): Promise<void> {
  if (!(await socketAnswers(socketPath))) return;
  let pid = '';
  const host = makeClient(HostServiceDesc, `unix:${socketPath}`);
  try {
    pid = `, pid ${(await host.getHostInfo({}, { deadline: Date.now() + 3000 })).pid}`;
  } catch {
  } finally {
    host.grpc.close();
  }
  throw new Error(`another feosd serves ${socketPath}${pid}: stop it, or give this one another --run-dir`);
}

/**
 * Starts feosd: waits for the state dir's lock, loads the records, takes the microVMs and pods over,
 * and serves.
 * @throws Error naming the step (lock, records, bind) when feosd cannot start
 */
export async function startFeosd(opts: FeosdOptions, signal?: AbortSignal): Promise<Feosd> {
  // An empty flag would resolve to the working directory.
  for (const [flag, v] of [
    ['--state-dir', opts.stateDir],
    ['--run-dir', opts.runDir],
    ['--guest-dir', opts.guestDir],
  ] as const) {
    if (!v.trim()) throw new Error(`${flag} is empty: want a directory`);
  }
  if (opts.tcp !== undefined) checkTcpAddress(opts.tcp);
  // Absolute paths: they end up in qcow2 backing files, QEMU's arguments and records.
  const o: FeosdOptions = { ...opts, stateDir: resolve(opts.stateDir), runDir: resolve(opts.runDir), guestDir: resolve(opts.guestDir) };
  const log = o.log ?? createLogger('feosd');
  await makeDirs('--state-dir', o.stateDir, 0o700);
  await makeDirs('--run-dir', o.runDir);
  const lockFd = await takeStateLock(join(o.stateDir, 'feosd.lock'), log, signal);
  const startedAt = Date.now();
  const versions = guestVersions(o.guestDir);
  const kernel = versions.length > 0 ? join(o.guestDir, versions.at(-1)!, 'vmlinuz') : undefined;
  const accelerator = await chooseAccelerator(o.accelerator, o.stateDir, o.qemu, kernel);
  log.info({ accelerator, guests: versions }, 'feosd starting');
  if (versions.length === 0) {
    log.warn({ guestDir: o.guestDir }, `no guest installed in ${o.guestDir}: every bring-up will fail until one is (scripts/build-guest.sh ${o.guestDir})`);
  }
  const vms = new MicroVmService({ vmsDir: join(o.stateDir, 'vms'), qemu: o.qemu, accelerator, log, cgroup: o.vmsCgroup });
  await vms.init();
  const records = new PodRecords(join(o.stateDir, 'pods'), log);
  await records.load();
  let network: PodNetwork | undefined;
  let provider = o.network ?? unavailablePodNetwork;
  if (!o.network && o.networkFlags?.podPrefix) {
    network = createNetwork({ stateDir: o.stateDir, log, ...o.networkFlags });
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
    const addresses = await network.start(kept);
    for (const [id, a] of addresses) {
      const p = records.get(id);
      if (p && (p.ipv6Address !== (a.ipv6 ?? '') || p.ipv4Address !== (a.ipv4 ?? ''))) {
        p.ipv6Address = a.ipv6 ?? '';
        p.ipv4Address = a.ipv4 ?? '';
        await records.save(p);
      }
    }
    const net = network;
    provider = { ...net.podNetworkProvider(), detach: (pod) => net.detachPod(pod.id) };
    if (network.unavailableReason) log.error({ reason: network.unavailableReason }, "the pods' network is not up; pods with a network fail");
  }
  const objectStore = typeof o.objectStore === 'string' ? openObjectStore(o.objectStore) : o.objectStore;
  const volumes = new VolumeStore(join(o.stateDir, 'volumes'), log);
  await volumes.load();
  const pods = new PodService({
    records,
    vms,
    volumes,
    network: provider,
    guestDir: o.guestDir,
    disksDir: join(o.stateDir, 'disks'),
    log,
    clockMaxRttMs: o.clockMaxRttMs,
    // TCG runs the guest about ten times slower than KVM, and Node's start in the guest with it.
    guestAttachMs: o.guestAttachMs ?? (accelerator === 'kvm' ? 60_000 : 180_000),
    registryForwards: o.registryForwards,
    insecureRegistries: o.insecureRegistries,
    objectStore,
  });
  await pods.init();

  const server = new grpc.Server({ 'grpc.max_receive_message_length': 512 * 1024 * 1024 });
  // close() aborts `stopping` at once (calls that change a pod are refused, watches end) and `cancelling`
  // when the calls' grace is over (the streams still running end); both with UNAVAILABLE "feosd stops".
  const stopping = new AbortController();
  const cancelling = new AbortController();
  const onError = (method: string, err: unknown) => {
    if (err instanceof FeosError) log.debug({ method, code: err.code, err: err.message }, 'call failed');
    else log.error({ method, err: errorMessage(err) }, 'call failed');
  };
  addPodService(server, { pods, stopping: stopping.signal, cancelling: cancelling.signal, onError });
  addService(
    server,
    VolumeServiceDesc,
    {
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
    },
    onError,
  );
  for (const svc of network?.grpcServices() ?? []) server.addService(svc.definition, svc.implementation);
  let lockHeld = true;
  addService(
    server,
    HostServiceDesc,
    hostHandlers({
      guestDir: o.guestDir,
      stateDir: o.stateDir,
      accelerator: () => accelerator,
      selfUpgrade: o.selfUpgrade,
      startedAt,
      exec: (path) => {
        log.info({ path }, 'self-upgrade: exec');
        vms.closeAll();
        process.execve!(path, [path, ...process.argv.slice(2)], process.env);
      },
    }),
    onError,
  );

  const socketPath = join(o.runDir, 'api.sock');
  const bind = (target: string) =>
    new Promise<number>((resolve, reject) =>
      server.bindAsync(target, grpc.ServerCredentials.createInsecure(), (err, port) =>
        err ? reject(new Error(`bind ${target}: ${err.message}`, { cause: err })) : resolve(port),
      ),
    );
  let tcpPort: number | undefined;
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
    if (o.tcp) tcpPort = await bind(o.tcp);
  } catch (err: unknown) {
    // Nothing stays behind: no socket of ours, no lock, no services.
    server.forceShutdown();
    if (socketBound) await rm(socketPath, { force: true });
    pods.close();
    await network?.stop();
    vms.closeAll();
    closeSync(lockFd);
    throw err;
  }
  log.info({ socket: socketPath, tcpPort }, 'feosd serving');
  notifyReady(log);

  // Suspend on stop: the pods a stop before suspended are resumed (seed 000, "Suspend on stop").
  const stopRecord = new StopRecordKeeper(o.stateDir, pods, log);
  stopRecord.startResumes(stopping.signal);

  return {
    tcpPort,
    socketPath,
    pods,
    resumesAfterStop: stopRecord.resumes,
    close: async ({ callsGraceMs = 30_000, suspendOnStop = false, graceEndsAt = Date.now() + 300_000 }: CloseOptions = {}) => {
      stopping.abort();
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
    },
  };
}
