/**
 * feosd's side of the control plane (seed 000, "The control plane", "Stopping"; docs/feos/fleet.md):
 * the join, the identity in `--node-dir`, the node connections, the uplink (reports, events, renewal,
 * stopping) and the watchdog. Nothing of it stops feosd: what fails is logged (once per distinct
 * failure) and tried again, and the socket serves on.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import os from 'node:os';
import type http2 from 'node:http2';
import { setTimeout as sleep } from 'node:timers/promises';
import { timestampFromDate } from '@bufbuild/protobuf/wkt';
import type { DescMessage, MessageInitShape, MessageShape } from '@bufbuild/protobuf';
import type { Logger } from '../../lib/index.ts';
import {
  JoinMeshRequestSchema,
  JoinMeshResponseSchema,
  JoinRequestSchema,
  JoinResponseSchema,
  JoinService,
  NodeService,
  type NodeEventSchema,
  ReportRequestSchema,
  ReportResponseSchema,
  RenewRequestSchema,
  RenewResponseSchema,
  SendEventsRequestSchema,
  SendEventsResponseSchema,
  StoppingRequestSchema,
  StoppingResponseSchema,
  type Instance,
} from '../gen/feos/fleet/v1/fleet_pb.js';
import { type PodEvent, type PodInfo, PodState } from '../gen/feos/pod/v1/pod_pb.js';
import { clientSession, Code, GrpcCallError, unaryCall } from './h2.ts';
import {
  checkIssuedChain,
  ensureNodeDir,
  type Identity,
  type InstanceRef,
  loadIdentity,
  loadOrMakeKey,
  makeCsr,
  moveIdentityAside,
  writeIdentity,
  writeRecord,
} from './identity.ts';
import { NodeConnections, type ServedService } from './node-conn.ts';
import { allocatableMemoryBytes } from '../pods/index.ts';
import { bundleHoldsPin, dialControlPlane, splitAddress } from './tls.ts';
import { parseJoinToken } from './token.ts';

/** feosd's flags for the control plane. */
export interface FleetFlags {
  /** `--control-plane HOST:PORT`: the join dials it, and so does the rest while no instance is listed. */
  controlPlane: string;
  /** `--control-plane-name`: the name the control plane's certificate is checked for. @default HOST */
  controlPlaneName?: string;
  /** `--trust-domain` @default "feos.local" */
  trustDomain: string;
  /** `--join-token-file` @default "/etc/feos/join-token" */
  joinTokenFile: string;
  /** `--node-dir` @default "/var/lib/feos/node" */
  nodeDir: string;
  /** `--node-name`: the node's name. @default the hostname, lowercased */
  nodeName?: string;
  /**
   * `--fence-after SECONDS`, as ms: no report answered for this long, the node suspends the pods the
   * control plane may restore elsewhere (see {@link FENCED_REASON}); 0: never. @default 40000 (the
   * control plane's node monitor grace period, after which it sees the node Unknown)
   */
  fenceAfterMs?: number;
}

/**
 * The start of a fenced pod's `reason`: the FeOS kubelet of the control plane resumes a SUSPENDED pod whose
 * reason starts so once its Pod is still bound to this node (src/fleet/kubelet), and deletes it when its
 * Pod was restored elsewhere (the sweep of orphans).
 */
export const FENCED_REASON = 'fenced:';
/** The metadata key of pods a Kube32 control plane made (src/fleet/kubelet/spec.ts): only those are fenced. */
const CLUSTER_ID_KEY = 'kube32.cluster-id';

/** What the fleet needs of feosd. */
export interface FleetDeps {
  /** The services feosd serves on its socket (recordServices), served on the node connections. */
  services: ServedService[];
  /** The pod service: its pods for the reports, its events for the uplink. */
  pods: {
    list(): PodInfo[];
    on(e: 'event', fn: (ev: PodEvent) => void): unknown;
    off(e: 'event', fn: (ev: PodEvent) => void): unknown;
    /** SuspendPod with a reason (the fence); absent: the node never fences. */
    act?(id: string, action: { kind: 'suspend'; reason?: string }): Promise<unknown>;
  };
  accelerator: string;
  guestVersions: () => string[];
  version: string;
  log: Logger;
  /** The join and the connections start once it settles, or after two minutes (suspend on stop's resumes). */
  startAfter?: Promise<unknown>;
  /** How long the event loop or the pods may stay silent before the reports stop (ms). @default 90000 */
  watchdogMs?: number;
  /**
   * The node's mesh (src/feos/network's NodeMesh): JoinMesh after the first answered report, and
   * again when what it asks (the key, the endpoint) changes or an answer was not taken. @default none
   */
  mesh?: {
    /** The request's fields; `localAddress` is the address the uplink reaches the control plane from. */
    joinAsk(localAddress: string): { publicKey: string; endpoint: string };
    /** Takes the answer; false = not taken (asked again at the next report). */
    joined(ask: { publicKey: string; endpoint: string }, answer: { meshed: boolean; clusterPrefix: string; nodePrefix: string }): Promise<boolean>;
  };
}

/** The running fleet client. */
export interface Fleet {
  /** This start's ID (a UUID): the reports' and the events' start_id. */
  readonly startId: string;
  /**
   * The stop (seed "Stopping"): the Stopping event and call (3 s for its answer), GOAWAY on every node
   * connection, the calls in flight up to `callsGraceMs`, the rest ended with UNAVAILABLE "the node
   * stops", the connections closed within 5 s, the reports ended. Never throws.
   */
  stop(callsGraceMs: number): Promise<void>;
  /** Before a self-upgrade's exec: the Upgrading event, sent within a second if it can be. */
  upgrading(path: string): Promise<void>;
}

/** The default report interval (ms). */
export const REPORT_INTERVAL_MS = 3000;
/** The events kept in memory at most. */
export const MAX_EVENTS = 16_384;
const MAX_BATCH = 1000;
const JOIN_FIRST_BACKOFF_MS = 1000;
const JOIN_MAX_BACKOFF_MS = 30_000;

type NodeEventInit = MessageInitShape<typeof NodeEventSchema>;

/** Logs a failure once while it stays the same; `clear` forgets it after a success. */
function onceLogger(log: Logger) {
  const last = new Map<string, string>();
  return {
    warn(key: string, msg: string, fields: Record<string, unknown> = {}) {
      if (last.get(key) === msg) return;
      last.set(key, msg);
      log.warn({ ...fields, err: msg }, `control plane: ${key}`);
    },
    clear(key: string) {
      last.delete(key);
    },
  };
}

/** The uplink: one instance at a time, the next at once when a call fails. */
class Uplink {
  #instances: string[];
  #at = 0;
  #session?: http2.ClientHttp2Session;
  #creds: Identity;
  /** The local address of the last connection: the node's address as the control plane sees it. */
  localAddress = '';
  readonly #name: string;
  readonly #trustDomain: string;

  constructor(instances: string[], creds: Identity, name: string, trustDomain: string) {
    this.#instances = instances;
    this.#creds = creds;
    this.#name = name;
    this.#trustDomain = trustDomain;
  }

  setInstances(instances: string[]): void {
    const cur = this.#instances[this.#at];
    this.#instances = instances;
    const i = cur === undefined ? -1 : instances.indexOf(cur);
    if (i >= 0) this.#at = i;
    else {
      this.#at = 0;
      this.close();
    }
  }

  /** New credentials: the next call dials a new connection with them; the old one drains. */
  setCredentials(creds: Identity): void {
    this.#creds = creds;
    this.#session?.close();
    this.#session = undefined;
  }

  async #connect(timeoutMs: number): Promise<http2.ClientHttp2Session> {
    if (this.#session && !this.#session.closed && !this.#session.destroyed) return this.#session;
    const address = this.#instances[this.#at]!;
    const socket = await dialControlPlane({
      address,
      name: this.#name,
      trustDomain: this.#trustDomain,
      alpn: 'h2',
      trust: { bundlePem: this.#creds.bundlePem },
      client: { keyPem: this.#creds.keyPem, chainPem: this.#creds.chainPem },
      timeoutMs,
    });
    const s = clientSession(socket, this.#name);
    this.#session = s;
    this.localAddress = socket.localAddress ?? '';
    // A GOAWAY (the instance drains or restarts): the next call dials again.
    const forget = () => {
      if (this.#session === s) this.#session = undefined;
    };
    s.once('close', forget);
    s.once('goaway', forget);
    return s;
  }

  /**
   * A NodeService call, on the current instance, then on each next one at once while it fails.
   * @throws GrpcCallError PERMISSION_DENIED at once; the last failure when every instance failed
   */
  async call<I extends DescMessage, O extends DescMessage>(name: string, input: I, output: O, req: MessageInitShape<I>, timeoutMs: number): Promise<MessageShape<O>> {
    let last: unknown;
    // `timeoutMs` bounds the call as a whole: the dials and the tries on every instance.
    const deadline = Date.now() + timeoutMs;
    for (let tries = 0; tries < Math.max(1, this.#instances.length); tries++) {
      const left = deadline - Date.now();
      if (left <= 0) break;
      try {
        const s = await this.#connect(Math.min(10_000, left));
        return await unaryCall(s, NodeService, name, input, output, req, Math.max(1, deadline - Date.now()));
      } catch (err: unknown) {
        if (err instanceof GrpcCallError && err.code === Code.PERMISSION_DENIED) throw err;
        last = err;
        this.close();
        this.#at = (this.#at + 1) % Math.max(1, this.#instances.length);
      }
    }
    throw last ?? new GrpcCallError(Code.DEADLINE_EXCEEDED, `${name}: no instance answered within ${timeoutMs} ms`);
  }

  close(): void {
    this.#session?.close();
    this.#session = undefined;
  }
}

/** The node's capacity and facts for the reports. */
function nodeInfo(deps: FleetDeps) {
  let bootId = '';
  try {
    bootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {}
  const addresses = Object.values(os.networkInterfaces())
    .flat()
    .filter((a) => a && !a.internal)
    .map((a) => a!.address);
  const cpus = os.availableParallelism();
  return {
    hostname: os.hostname(),
    kernelRelease: os.release(),
    bootId,
    feosdVersion: deps.version,
    accelerator: deps.accelerator,
    cpus,
    memoryBytes: BigInt(os.totalmem()),
    allocatableCpus: cpus,
    allocatableMemoryBytes: allocatableMemoryBytes(),
    maxPods: 110,
    guestVersions: deps.guestVersions(),
    architecture: process.arch === 'x64' ? 'amd64' : process.arch,
    addresses,
  };
}

/**
 * Starts the fleet client in the background (the join, then the connections and the uplink) and
 * returns at once.
 */
export function startFleet(flags: FleetFlags, deps: FleetDeps): Fleet {
  const log = deps.log;
  const once = onceLogger(log);
  const startId = randomUUID();
  const cpName = flags.controlPlaneName || splitAddress(flags.controlPlane).host;
  const nodeName = (flags.nodeName || os.hostname()).toLowerCase();
  const watchdogMs = deps.watchdogMs ?? 90_000;
  const stopAc = new AbortController();
  const stopSignal = stopAc.signal;
  const wait = (ms: number) => sleep(ms, undefined, { signal: stopSignal }).catch(() => undefined);

  // The events of this start, kept until acknowledged.
  let events: NodeEventInit[] = [];
  let nextSeq = 1n;
  let dropped = 0n;
  let flushing = false;
  let flushTimer: NodeJS.Timeout | undefined;
  let uplink: Uplink | undefined;
  let removed: ((why: string) => void) | undefined;
  const push = (event: NodeEventInit['event']) => {
    events.push({ sequence: nextSeq++, time: timestampFromDate(new Date()), event });
    if (events.length > MAX_EVENTS) {
      events.shift();
      dropped++;
    }
    if (uplink && !flushTimer) flushTimer = setTimeout(() => void flush(2000), 50);
  };
  const feosdEvent = (reason: string, message: string) => push({ case: 'feosd', value: { reason, message } });
  const onPodEvent = (ev: PodEvent) => {
    if (!ev.initial) push({ case: 'pod', value: ev });
  };
  deps.pods.on('event', onPodEvent);
  feosdEvent('Started', `feosd ${deps.version} started, pid ${process.pid}`);

  /** Sends the events kept, in batches, until all are acknowledged or a call fails. */
  let flushRun: Promise<void> = Promise.resolve();
  function flush(timeoutMs: number): Promise<void> {
    clearTimeout(flushTimer);
    flushTimer = undefined;
    if (flushing || !uplink) return flushRun;
    flushRun = flushNow(uplink, timeoutMs);
    return flushRun;
  }
  async function flushNow(up: Uplink, timeoutMs: number): Promise<void> {
    flushing = true;
    try {
      while (events.length > 0) {
        const batch = events.slice(0, MAX_BATCH);
        const res = await up.call('SendEvents', SendEventsRequestSchema, SendEventsResponseSchema, { startId, events: batch, dropped }, timeoutMs);
        const before = events.length;
        events = events.filter((e) => (e.sequence as bigint) > res.acknowledged);
        once.clear('events');
        if (events.length === before) break;
      }
    } catch (err: unknown) {
      if (err instanceof GrpcCallError && err.code === Code.PERMISSION_DENIED) removed?.(err.message);
      else once.warn('events', (err as Error).message, { kept: events.length });
    } finally {
      flushing = false;
    }
  }

  /** The token file's text ('' when it cannot be read), and why not. */
  async function readToken(): Promise<{ text: string; why?: string }> {
    try {
      const text = await readFile(flags.joinTokenFile, 'utf8');
      // The token is a secret: as ssh does for a private key, say so when others may read it (not refused: an
      // operator's provisioning may run as another user first; the join makes the token spent in any case).
      const mode = (await stat(flags.joinTokenFile)).mode & 0o777;
      if (mode & 0o077) once.warn('join token mode', `${flags.joinTokenFile} holds a secret and is readable by group or others (mode ${mode.toString(8).padStart(4, '0')}): chmod 600 it`);
      else once.clear('join token mode');
      return { text };
    } catch (err: unknown) {
      const code = (err as NodeJS.ErrnoException).code;
      return { text: '', why: code === 'ENOENT' ? `${flags.joinTokenFile} does not exist: put the join token (kube32-cli feos token create) there, or give --join-token-file` : `${flags.joinTokenFile}: ${(err as Error).message}` };
    }
  }

  /** A token text the control plane refused (or that a removal used): not sent again until the file holds another. */
  let refusedText: string | undefined;

  /** Joins with the token file's token; loops until it joined or the stop. */
  async function join(): Promise<Identity | undefined> {
    let keyPem: string | undefined;
    let backoff = JOIN_FIRST_BACKOFF_MS;
    while (!stopSignal.aborted) {
      try {
        await ensureNodeDir(flags.nodeDir);
        keyPem ??= await loadOrMakeKey(flags.nodeDir);
      } catch (err: unknown) {
        once.warn('node directory', (err as Error).message);
        await wait(JOIN_MAX_BACKOFF_MS);
        continue;
      }
      const { text, why } = await readToken();
      if (why) {
        once.warn('join token', why);
        await wait(1000);
        continue;
      }
      if (refusedText !== undefined && text === refusedText) {
        once.warn('join token', `the join token in ${flags.joinTokenFile} was refused (or the node was removed): waiting for another token in the file`);
        await wait(1000);
        continue;
      }
      let token: ReturnType<typeof parseJoinToken>;
      try {
        token = parseJoinToken(text);
      } catch (err: unknown) {
        once.warn('join token', `${flags.joinTokenFile}: ${(err as Error).message}`);
        await wait(1000);
        continue;
      }
      once.clear('join token');
      let session: http2.ClientHttp2Session | undefined;
      try {
        const socket = await dialControlPlane({ address: flags.controlPlane, name: cpName, trustDomain: flags.trustDomain, alpn: 'h2', trust: { pin: token.pin } });
        session = clientSession(socket, cpName);
        const csrPem = await makeCsr(keyPem, nodeName, flags.trustDomain);
        const res = await unaryCall(session, JoinService, 'Join', JoinRequestSchema, JoinResponseSchema, { tokenSecret: token.secret, nodeName, csrPem }, 15_000);
        if (!bundleHoldsPin(res.trustBundlePem, token.pin)) throw new Error("the join's answer: the trust bundle does not hold the root the token pins");
        checkIssuedChain(res.chainPem, keyPem, res.spiffeId);
        const record = {
          name: nodeName,
          spiffeId: res.spiffeId,
          notAfter: res.notAfter ? new Date(Number(res.notAfter.seconds) * 1000).toISOString() : '',
          renewAt: res.renewAt ? new Date(Number(res.renewAt.seconds) * 1000).toISOString() : new Date().toISOString(),
          instances: res.instances.map((i: Instance) => ({ name: i.name, address: i.address })),
        };
        await writeIdentity(flags.nodeDir, { chainPem: res.chainPem, bundlePem: res.trustBundlePem, record });
        once.clear('join');
        log.info({ name: nodeName, spiffeId: res.spiffeId, notAfter: record.notAfter, instances: record.instances }, 'joined the control plane');
        return { keyPem, chainPem: res.chainPem, bundlePem: res.trustBundlePem, record };
      } catch (err: unknown) {
        if (err instanceof GrpcCallError && err.code === Code.PERMISSION_DENIED) {
          refusedText = text;
          log.error({ err: err.message, tokenFile: flags.joinTokenFile }, 'control plane: the join token was refused; it is not sent again until the file holds another');
          continue;
        }
        once.warn('join', (err as Error).message, { retryMs: backoff });
        await wait(backoff);
        backoff = Math.min(backoff * 2, JOIN_MAX_BACKOFF_MS);
      } finally {
        session?.close();
      }
    }
    return undefined;
  }

  /** The joined node's life: connections, reports, renewal; returns at a removal or the stop. */
  let nodeConns: NodeConnections | undefined;
  let reportsEnded: Promise<void> = Promise.resolve();
  async function runJoined(id: Identity): Promise<void> {
    let current = id;
    // Node connections go to the instances the control plane listed last (--control-plane while it listed none);
    // the uplink tries --control-plane after them, so that a control plane that came back on another port (the
    // instances kept then stale) is found where the operator says it is, and its answer lists the instances anew.
    const addresses = () => (current.record.instances.length > 0 ? current.record.instances.map((i) => i.address) : [flags.controlPlane]);
    const uplinkAddresses = () => [...new Set([...addresses(), flags.controlPlane])];
    const conns = new NodeConnections({ services: deps.services, name: cpName, trustDomain: flags.trustDomain, credentials: () => current, log });
    nodeConns = conns;
    const up = new Uplink(uplinkAddresses(), current, cpName, flags.trustDomain);
    conns.setInstances(addresses());
    let resolveRemoved!: () => void;
    const gone = new Promise<void>((r) => {
      resolveRemoved = r;
    });
    let isRemoved = false;
    removed = (why: string) => {
      if (isRemoved || stopSignal.aborted) return;
      isRemoved = true;
      log.error({ err: why }, 'control plane: the node was removed (PERMISSION_DENIED); its identity moves aside and it joins again once the token file holds a new token');
      resolveRemoved();
    };
    uplink = up;

    // The watchdog: a tick every second on feosd's event loop; the pods' last answer.
    let loopTick = Date.now();
    const ticker = setInterval(() => {
      loopTick = Date.now();
    }, 1000);
    let podsAnswered = Date.now();
    let lastPods: PodInfo[] = [];
    const collectPods = async (): Promise<{ pods: PodInfo[]; stale: boolean }> => {
      const answer = new Promise<PodInfo[]>((resolve, reject) => {
        try {
          resolve(deps.pods.list());
        } catch (err: unknown) {
          reject(err);
        }
      }).then((p) => {
        podsAnswered = Date.now();
        lastPods = p;
        return p;
      });
      const t = sleep(1000, undefined, { ref: false }).then(() => undefined);
      const p = await Promise.race([answer, t]).catch(() => undefined);
      return p ? { pods: p, stale: false } : { pods: lastPods, stale: true };
    };

    let interval = REPORT_INTERVAL_MS;
    let reporting = false;
    let reportTimer: NodeJS.Timeout | undefined;
    let next = Date.now();
    const instancesChanged = async (list: Instance[]) => {
      if (list.length === 0) return;
      const refs: InstanceRef[] = list.map((i) => ({ name: i.name, address: i.address }));
      if (JSON.stringify(refs) === JSON.stringify(current.record.instances)) return;
      current = { ...current, record: { ...current.record, instances: refs } };
      await writeRecord(flags.nodeDir, current.record).catch((err: unknown) => once.warn('node.json', (err as Error).message));
      log.info({ instances: refs }, 'control plane: the instances changed');
      up.setInstances(uplinkAddresses());
      conns.setInstances(addresses());
    };
    const report = async () => {
      // The next report is scheduled before this one is collected: the rate holds whatever it takes.
      next = Math.max(next + interval, Date.now());
      if (!stopSignal.aborted && !isRemoved) reportTimer = setTimeout(() => void report(), next - Date.now());
      if (reporting) return;
      const now = Date.now();
      if (now - loopTick > watchdogMs || now - podsAnswered > watchdogMs) {
        once.warn('watchdog', `feosd's ${now - loopTick > watchdogMs ? 'event loop' : 'pods'} did not answer for ${Math.round(watchdogMs / 1000)} s: no reports until they do`);
        // A report's collection still runs, so that the pods' answer is seen once they move.
        void collectPods();
        return;
      }
      once.clear('watchdog');
      reporting = true;
      try {
        const { pods, stale } = await collectPods();
        const res = await up.call(
          'Report',
          ReportRequestSchema,
          ReportResponseSchema,
          { startId, collectedAt: timestampFromDate(new Date()), node: nodeInfo(deps), pods, podsStale: stale },
          Math.max(interval, 3000),
        );
        once.clear('report');
        lastAnswered = Date.now();
        if (fenced.size > 0) {
          log.info({ pods: [...fenced] }, 'fence: the control plane answers again; its FeOS kubelet resumes the fenced pods still bound here');
          fenced.clear();
        }
        const asked = res.reportIntervalMs || REPORT_INTERVAL_MS;
        if (asked !== interval) {
          interval = asked;
          next = Date.now() + interval;
          clearTimeout(reportTimer);
          if (!stopSignal.aborted && !isRemoved) reportTimer = setTimeout(() => void report(), interval);
        }
        await instancesChanged(res.instances);
        void flush(Math.max(interval, 3000));
        void joinMesh();
      } catch (err: unknown) {
        if (err instanceof GrpcCallError && err.code === Code.PERMISSION_DENIED) removed?.(err.message);
        else once.warn('report', (err as Error).message);
      } finally {
        reporting = false;
      }
    };
    // JoinMesh (the mesh): after an answered report, while what it asks was not taken.
    let meshTaken: string | undefined;
    let joiningMesh = false;
    const joinMesh = async () => {
      const mesh = deps.mesh;
      if (!mesh || joiningMesh || stopSignal.aborted || isRemoved) return;
      joiningMesh = true;
      try {
        const ask = mesh.joinAsk(up.localAddress);
        const asked = JSON.stringify(ask);
        if (asked === meshTaken) return;
        const res = await up.call('JoinMesh', JoinMeshRequestSchema, JoinMeshResponseSchema, ask, 15_000);
        if (await mesh.joined(ask, res)) {
          meshTaken = asked;
          once.clear('mesh');
          log.info({ meshed: res.meshed, clusterPrefix: res.clusterPrefix, nodePrefix: res.nodePrefix }, 'control plane: JoinMesh answered');
        } else once.warn('mesh', res.meshed ? 'JoinMesh gave no /96: asked again at the next report' : 'the cluster has no mesh yet: asked again at the next report');
      } catch (err: unknown) {
        if (err instanceof GrpcCallError && err.code === Code.PERMISSION_DENIED) removed?.(err.message);
        else once.warn('mesh', (err as Error).message);
      } finally {
        joiningMesh = false;
      }
    };
    void report();

    // The fence (docs/feos/cluster-pods.md, "Fencing"): a node the control plane has not heard from for
    // the grace sees itself as lost, and its pods may be restored elsewhere from their checkpoints; it
    // suspends them (their memory on its disk) so that a pod never runs on two nodes.
    let lastAnswered = Date.now();
    const fenced = new Set<string>();
    const fenceAfterMs = flags.fenceAfterMs ?? 40_000;
    const fenceTimer = setInterval(() => {
      if (fenceAfterMs <= 0 || !deps.pods.act || Date.now() - lastAnswered < fenceAfterMs) return;
      for (const pod of deps.pods.list()) {
        if (pod.state !== PodState.RUNNING || !pod.spec?.metadata?.[CLUSTER_ID_KEY] || fenced.has(pod.id)) continue;
        fenced.add(pod.id);
        const reason = `${FENCED_REASON} no report reached the control plane for ${Math.round((Date.now() - lastAnswered) / 1000)} s; it may restore the pod on another node`;
        log.warn({ id: pod.id, fenceAfterMs }, 'fence: suspending a pod the control plane may restore elsewhere');
        deps.pods.act(pod.id, { kind: 'suspend', reason }).catch((err: unknown) => {
          fenced.delete(pod.id);
          log.warn({ id: pod.id, err: (err as Error).message }, 'fence: the suspend failed; tried again in a second');
        });
      }
    }, 1000);
    fenceTimer.unref();

    // The renewal, at the certificate's renewal time.
    let renewTimer: NodeJS.Timeout | undefined;
    const scheduleRenewal = (inMs: number) => {
      clearTimeout(renewTimer);
      renewTimer = setTimeout(() => void renew(), Math.min(Math.max(0, inMs), 2 ** 31 - 1));
    };
    const renew = async () => {
      if (stopSignal.aborted || isRemoved) return;
      try {
        const csrPem = await makeCsr(current.keyPem, nodeName, flags.trustDomain);
        const res = await up.call('Renew', RenewRequestSchema, RenewResponseSchema, { csrPem }, 15_000);
        checkIssuedChain(res.chainPem, current.keyPem, current.record.spiffeId);
        const record = {
          ...current.record,
          notAfter: res.notAfter ? new Date(Number(res.notAfter.seconds) * 1000).toISOString() : current.record.notAfter,
          renewAt: res.renewAt ? new Date(Number(res.renewAt.seconds) * 1000).toISOString() : current.record.renewAt,
        };
        await writeIdentity(flags.nodeDir, { chainPem: res.chainPem, bundlePem: res.trustBundlePem || current.bundlePem, record });
        current = { ...current, chainPem: res.chainPem, bundlePem: res.trustBundlePem || current.bundlePem, record };
        once.clear('renewal');
        log.info({ notAfter: record.notAfter, renewAt: record.renewAt }, 'control plane: the certificate was renewed');
        up.setCredentials(current);
        conns.refresh();
        scheduleRenewal(Date.parse(record.renewAt) - Date.now());
      } catch (err: unknown) {
        if (err instanceof GrpcCallError && err.code === Code.PERMISSION_DENIED) return removed?.(err.message);
        once.warn('renewal', (err as Error).message, { retryMs: 10_000 });
        scheduleRenewal(10_000);
      }
    };
    scheduleRenewal(Date.parse(current.record.renewAt) - Date.now());

    const stopped = new Promise<void>((r) => stopSignal.addEventListener('abort', () => r(), { once: true }));
    reportsEnded = Promise.race([gone, stopped]).then(() => {
      clearTimeout(reportTimer);
      clearTimeout(renewTimer);
      clearInterval(ticker);
      clearInterval(fenceTimer);
    });
    await reportsEnded;
    if (stopSignal.aborted) return;
    // Removed: the connections close, the identity moves aside, a new token is awaited.
    uplink = undefined;
    removed = undefined;
    conns.destroy();
    up.close();
    nodeConns = undefined;
    refusedText = (await readToken()).text;
    try {
      const to = await moveIdentityAside(flags.nodeDir);
      log.info({ to }, 'control plane: the identity was moved aside');
    } catch (err: unknown) {
      log.error({ err: (err as Error).message }, 'control plane: the identity could not be moved aside');
    }
  }

  void (async () => {
    if (deps.startAfter) {
      await Promise.race([deps.startAfter.catch(() => undefined), wait(120_000)]);
    }
    while (!stopSignal.aborted) {
      let id: Identity | undefined;
      try {
        id = await loadIdentity(flags.nodeDir, (why) => log.warn({ err: why }, 'control plane: node.json'));
      } catch (err: unknown) {
        once.warn('identity', `${(err as Error).message}`);
        await wait(JOIN_MAX_BACKOFF_MS);
        continue;
      }
      id ??= await join();
      if (!id || stopSignal.aborted) break;
      await runJoined(id);
    }
  })().catch((err: unknown) => log.error({ err: (err as Error).message }, 'control plane: the fleet client ended'));

  return {
    startId,
    async stop(callsGraceMs: number) {
      if (stopSignal.aborted) return;
      const up = uplink;
      const conns = nodeConns;
      feosdEvent('Stopping', `feosd ${deps.version} stops (SIGTERM), pid ${process.pid}`);
      stopAc.abort();
      await reportsEnded;
      deps.pods.off('event', onPodEvent);
      try {
        if (up) {
          // The Stopping event goes out first: after a round in flight, within a second.
          await Promise.race([flushRun.then(() => flush(1000)), sleep(1000)]).catch(() => undefined);
          await up
            .call('Stopping', StoppingRequestSchema, StoppingResponseSchema, { startId, message: 'SIGTERM' }, 3000)
            .catch((err: unknown) => log.warn({ err: (err as Error).message }, 'control plane: Stopping was not acknowledged (3 s at most); the node connections close all the same'));
        }
        if (conns) await conns.stop(callsGraceMs);
      } finally {
        // A join in flight is let go (it writes what it got, and nothing runs after it).
        up?.close();
        clearTimeout(flushTimer);
      }
    },
    async upgrading(path: string) {
      feosdEvent('Upgrading', `feosd ${deps.version} execs ${path}, pid ${process.pid}`);
      await Promise.race([flush(1000), sleep(1000)]).catch(() => undefined);
    },
  };
}
