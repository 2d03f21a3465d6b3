/**
 * Where a Checkpoint's data is when several API servers serve one cluster (issue 11; seed 002
 * "Checkpoint objects and data", "Limits"). The snapshot stays in the memory of API servers, bounded,
 * and in each one's data dir (issue 26: read back after a restart, docs/checkpoints.md): the one that
 * received the PUT copies it to every live peer
 * (peers announce themselves with identity Leases `kube-system/apiserver-<instance>`, as
 * kube-apiserver does), records those that took it in the annotation {@link DATA_HOLDER_ANNOTATION}
 * (`<url> <instance>, ...`), and an API server that holds no copy answers a GET by proxying it to a
 * holder, as `system:kube-apiserver`. So the data outlives any one API server, and with data dirs a
 * restart of all of them.
 * The same identity Leases keep `default/kubernetes` Endpoints listing every live API server.
 * See docs/etcd.md.
 */
import { randomUUID } from 'node:crypto';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP } from 'node:net';
import { type ApiServerEndpoint, setKubernetesEndpoints } from './bootstrap.ts';
import type { ServerContext } from './handlers/context.ts';
import { findResource } from './registry/catalog.ts';
import type { Storage } from './storage/index.ts';
import { ANNOTATIONS } from '../api/index.ts';

/** Annotation of a Checkpoint naming the API servers that hold its data: `<url> <instance id>, ...`. */
export const DATA_HOLDER_ANNOTATION = ANNOTATIONS.checkpointDataHolders;
/** Header of a proxied GET: the holder instance it is meant for; the receiver never proxies it further. */
export const HOLDER_INSTANCE_HEADER = 'x-kube32-data-holder-instance';
/** Header of a PUT copying data to a peer: the Checkpoint's uid; the peer stores it and writes nothing. */
export const REPLICA_HEADER = 'x-kube32-data-replica';
/** Label of the identity Leases of API servers (as kube-apiserver's `apiserver-<hash>` Leases). */
export const IDENTITY_LABEL = 'apiserver.kubernetes.io/identity';
/** Annotation of an identity Lease: the URL peers reach that API server at. */
export const URL_ANNOTATION = ANNOTATIONS.apiserverUrl;
/** Duration of an identity Lease, s; renewed every third of it. */
export const IDENTITY_LEASE_SECONDS = 30;

/** This API server as a holder of checkpoint data. */
export interface CheckpointDataPeers {
  /** This server's URL as peers reach it (`https://127.0.0.1:6443`). */
  readonly selfUrl: string;
  /**
   * This server's id: kept in its data dir when it has one (a restarted server holds the data it kept
   * on disk, docs/checkpoints.md), else random for each process (a restarted server holds nothing).
   */
  readonly instance: string;
  /** The annotation's value naming this server. */
  readonly holder: string;
  /** Settles when the first renewal of the identity Lease (and of the Endpoints) is done; never rejects. */
  readonly ready: Promise<void>;
  /** Stops following Checkpoint deletions and renewing the identity Lease, and deletes the Lease. */
  stop(): Promise<void>;
}

/** A parsed {@link DATA_HOLDER_ANNOTATION}. */
export interface DataHolder {
  url: string;
  instance: string;
}

const peersOf = new WeakMap<ServerContext, CheckpointDataPeers & { caCertPem: string | undefined }>();

/** Options of {@link attachCheckpointDataPeers}. */
export interface CheckpointDataPeersOptions {
  /** The URL other API servers reach this one at: `https://<advertise address>:<port>`. */
  selfUrl: string;
  /** The CA that signs the peers' serving certificates (the cluster identity), or undefined for plain HTTP. */
  caCertPem: string | undefined;
  /** This server's id across restarts (see {@link CheckpointDataPeers.instance}). @default a random one */
  instance?: string;
  /** Duration of the identity Lease, s (renewed every third of it). @default 30 ({@link IDENTITY_LEASE_SECONDS}) */
  leaseDurationSeconds?: number;
  /**
   * Keep `default/kubernetes` Endpoints listing every API server whose identity Lease is current, as
   * kube-apiserver's lease endpoint reconciler does. @default true
   */
  kubernetesEndpoints?: boolean;
}

/**
 * Makes this API server a peer: it announces itself with the identity Lease
 * `kube-system/apiserver-<instance>` (`leaseDurationSeconds`, renewed every third of it; identity
 * Leases not renewed for an hour are deleted), names itself in the holders annotation of the data it
 * stores, drops its copy of a Checkpoint's data when any API server deletes the Checkpoint (a watch on
 * the storage, since the deletion may go through another server), and keeps `default/kubernetes`
 * Endpoints listing the live API servers: at each renewal, and when the earliest other Lease expires
 * (so a killed server leaves them at most one Lease duration after its last renewal); a clean stop
 * removes this server from them at once.
 * @throws RangeError for a `leaseDurationSeconds` that is not an integer of 3 to 3600
 */
export function attachCheckpointDataPeers(ctx: ServerContext, storage: Storage, opts: CheckpointDataPeersOptions): CheckpointDataPeers {
  const leaseSeconds = opts.leaseDurationSeconds ?? IDENTITY_LEASE_SECONDS;
  if (!Number.isInteger(leaseSeconds) || leaseSeconds < 3 || leaseSeconds > 3600) throw new RangeError(`identity lease duration must be an integer of 3 to 3600 seconds: current value is ${leaseSeconds}`);
  const instance = opts.instance ?? randomUUID();
  const watch = storage.watch('checkpoints.kube32.io', storage.currentResourceVersion(), (e) => {
    if (e.type !== 'DELETED') return;
    const held = ctx.checkpointData.get(`${e.namespace}/${e.name}`, e.object.metadata.uid);
    if (held) ctx.checkpointData.delete(`${e.namespace}/${e.name}`);
  });
  const leases = findResource('coordination.k8s.io', 'v1', 'leases')!;
  const leaseName = `apiserver-${instance}`;
  let stopped = false;
  /** Set when stop() begins: no renewal after it. */
  let stopping = false;
  let expiryTimer: NodeJS.Timeout | undefined;
  const reconcileEndpoints = async () => {
    if (stopped || opts.kubernetesEndpoints === false) return;
    clearTimeout(expiryTimer);
    try {
      // The Leases read and the Endpoints written in one transaction: a server that stops (deleting
      // its Lease, then writing the Endpoints without itself) between this read and this write makes
      // the commit lose and run again. Else this write put the stopped server back, until the next
      // renewal of some API server (a third of the Lease duration later).
      const live = await ctx.registry.storage.transaction(async () => {
        const servers = await liveApiServers(ctx);
        // A list's condition catches Leases changed or added since, not deleted ones (etcd compares
        // the keys that exist): each Lease read by its key is a condition of its own.
        for (const s of servers) await ctx.registry.find(leases, 'kube-system', `apiserver-${s.instance}`);
        await setKubernetesEndpoints(ctx.registry, servers.flatMap((s) => endpointOf(s.url) ?? []));
        return servers;
      });
      const next = Math.min(...live.filter((s) => s.instance !== instance).map((s) => s.expiresAt));
      if (Number.isFinite(next)) {
        expiryTimer = setTimeout(reconcileEndpoints, Math.min(2 ** 31 - 1, Math.max(0, next - Date.now()) + 50));
        expiryTimer.unref();
      }
    } catch (err: unknown) {
      ctx.log.warn({ err: err instanceof Error ? err.message : String(err) }, 'cannot update the kubernetes Endpoints; next renewal tries again');
    }
  };
  const renew = async () => {
    if (stopping) return;
    const spec = { holderIdentity: leaseName, leaseDurationSeconds: leaseSeconds, renewTime: microTime(new Date()) };
    try {
      if (await ctx.registry.find(leases, 'kube-system', leaseName)) await ctx.registry.serverUpdate(leases, 'kube-system', leaseName, (o) => ({ ...o, spec: { ...(o.spec as object), ...spec } }));
      else await ctx.registry.create(leases, 'kube-system', { metadata: { name: leaseName, labels: { [IDENTITY_LABEL]: 'kube-apiserver' }, annotations: { [URL_ANNOTATION]: opts.selfUrl } }, spec });
    } catch (err: unknown) {
      ctx.log.warn({ lease: leaseName, err: err instanceof Error ? err.message : String(err) }, 'cannot renew the API server identity Lease');
    }
    // Leases of API servers killed without a clean stop go an hour after their last renewal (as kube-apiserver's GC of them).
    try {
      for (const l of (await ctx.registry.list(leases, 'kube-system', { labelSelector: `${IDENTITY_LABEL}=kube-apiserver` })).items) {
        const renewed = Date.parse(String((l.spec as { renewTime?: string } | undefined)?.renewTime ?? ''));
        if (Date.now() - renewed > 3_600_000) await ctx.registry.delete(leases, 'kube-system', l.metadata.name ?? '');
      }
    } catch {
      // another API server deleted it first, or etcd is unreachable: next time
    }
    await reconcileEndpoints();
  };
  const renewLogged = () =>
    renew().catch((err: unknown) => ctx.log.warn({ err: err instanceof Error ? err.message : String(err) }, 'checkpoint data: renewing the identity Lease failed'));
  const ready = renewLogged();
  const timer = setInterval(() => void renewLogged(), (leaseSeconds * 1000) / 3);
  timer.unref();
  const peers = {
    selfUrl: opts.selfUrl,
    instance,
    holder: `${opts.selfUrl} ${instance}`,
    caCertPem: opts.caCertPem,
    ready,
    stop: async () => {
      if (stopped || stopping) return;
      stopping = true;
      watch.stop();
      clearInterval(timer);
      try {
        await ctx.registry.delete(leases, 'kube-system', leaseName);
      } catch {
        // gone already, or the storage is unreachable: the Lease expires
      }
      // The others' Endpoints without this server, at once (as kube-apiserver removes itself on shutdown).
      await reconcileEndpoints();
      stopped = true;
      clearTimeout(expiryTimer);
    },
  };
  peersOf.set(ctx, peers);
  return peers;
}

/** `{ip, port}` of an API server's URL for the Endpoints, or undefined when its host is not an IP address. */
function endpointOf(url: string): ApiServerEndpoint | undefined {
  try {
    const u = new URL(url);
    const ip = u.hostname.replace(/^\[|\]$/g, '');
    if (!isIP(ip)) return undefined;
    return { ip, port: u.port ? Number(u.port) : u.protocol === 'https:' ? 443 : 80 };
  } catch {
    return undefined;
  }
}

function microTime(d: Date): string {
  return d.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

/** An API server whose identity Lease is current. */
export interface LiveApiServer extends DataHolder {
  /** When its Lease expires unless renewed, ms since the epoch (by this server's clock). */
  expiresAt: number;
}

/** Every API server whose identity Lease is current (this one included, once it has renewed). */
export async function liveApiServers(ctx: ServerContext): Promise<LiveApiServer[]> {
  const leases = findResource('coordination.k8s.io', 'v1', 'leases')!;
  const now = Date.now();
  const out: LiveApiServer[] = [];
  for (const l of (await ctx.registry.list(leases, 'kube-system', { labelSelector: `${IDENTITY_LABEL}=kube-apiserver` })).items) {
    const spec = (l.spec ?? {}) as { renewTime?: string; leaseDurationSeconds?: number };
    const url = l.metadata.annotations?.[URL_ANNOTATION];
    const instance = (l.metadata.name ?? '').replace(/^apiserver-/, '');
    const expiresAt = Date.parse(spec.renewTime ?? '') + (spec.leaseDurationSeconds ?? IDENTITY_LEASE_SECONDS) * 1000;
    if (!url || !(expiresAt > now)) continue;
    out.push({ url, instance, expiresAt });
  }
  return out;
}

/** The other API servers whose identity Lease is current: their URL and instance. */
export async function livePeers(ctx: ServerContext): Promise<DataHolder[]> {
  const self = peersOf.get(ctx);
  return (await liveApiServers(ctx))
    .filter((s) => s.instance !== self?.instance)
    .map(({ url, instance }) => ({ url, instance }));
}

/**
 * Copies a Checkpoint's snapshot to every live peer (PUT with {@link REPLICA_HEADER}), each bounded
 * to 10 s.
 * @returns the peers that stored it (a peer that is down, full or refuses is left out and logged)
 */
export async function replicateToPeers(ctx: ServerContext, path: string, uid: string, bytes: Buffer): Promise<DataHolder[]> {
  const peers = peersOf.get(ctx);
  const results = await Promise.all(
    (await livePeers(ctx)).map(
      (peer) =>
        new Promise<DataHolder | undefined>((resolve) => {
          const url = new URL(path, peer.url);
          const https = url.protocol === 'https:';
          const req = (https ? httpsRequest : httpRequest)(url, {
            method: 'PUT',
            headers: { Authorization: `Bearer ${ctx.kubeletToken}`, 'Content-Type': 'application/octet-stream', 'Content-Length': bytes.length, [REPLICA_HEADER]: uid },
            ...(https ? { ca: peers?.caCertPem } : {}),
            timeout: 10_000,
          });
          req.on('response', (res) => {
            res.resume();
            if (res.statusCode === 200) resolve(peer);
            else {
              ctx.log.warn({ peer: peer.url, code: res.statusCode }, 'checkpoint data: a peer API server did not take the copy');
              resolve(undefined);
            }
          });
          req.on('timeout', () => req.destroy(new Error('timeout')));
          req.on('error', (err) => {
            ctx.log.warn({ peer: peer.url, err: err.message }, 'checkpoint data: a peer API server does not answer');
            resolve(undefined);
          });
          req.end(bytes);
        }),
    ),
  );
  return results.filter((p): p is DataHolder => p !== undefined);
}

/** The peers of `ctx`, or undefined for a server started without them (a single API server). */
export function checkpointDataPeers(ctx: ServerContext): CheckpointDataPeers | undefined {
  return peersOf.get(ctx);
}

/** Parses the holders annotation (malformed entries are skipped). */
export function parseDataHolders(value: string | undefined): DataHolder[] {
  const out: DataHolder[] = [];
  for (const part of (value ?? '').split(',')) {
    const m = /^(https?:\/\/\S+) (\S+)$/.exec(part.trim());
    if (m) out.push({ url: m[1]!, instance: m[2]! });
  }
  return out;
}

/** Formats the holders annotation. */
export function formatDataHolders(holders: DataHolder[]): string {
  return holders.map((h) => `${h.url} ${h.instance}`).join(', ');
}

/**
 * GETs a Checkpoint's data from the API server holding it, authenticated as this server
 * (`ctx.kubeletToken`, user `system:kube-apiserver`; peers must share the token keys and CA).
 * Bounded to 30 s.
 * @returns the holder's response (status and body not yet read), or undefined when the holder
 *   cannot be reached (stopped or restarted elsewhere: the data is lost, as after a restart)
 */
export function fetchFromHolder(ctx: ServerContext, holder: DataHolder, path: string): Promise<IncomingMessage | undefined> {
  const peers = peersOf.get(ctx);
  const url = new URL(path, holder.url);
  const https = url.protocol === 'https:';
  return new Promise((resolve) => {
    const req = (https ? httpsRequest : httpRequest)(url, {
      method: 'GET',
      headers: { Authorization: `Bearer ${ctx.kubeletToken}`, Accept: 'application/octet-stream', [HOLDER_INSTANCE_HEADER]: holder.instance },
      ...(https ? { ca: peers?.caCertPem } : {}),
      timeout: 30_000,
    });
    req.on('response', resolve);
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => {
      ctx.log.warn({ holder: holder.url, err: err.message }, 'checkpoint data: the API server holding it does not answer');
      resolve(undefined);
    });
    req.end();
  });
}
