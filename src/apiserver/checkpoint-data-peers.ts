/**
 * Where a Checkpoint's data is when several API servers serve one cluster (issue 11; seed 002
 * "Checkpoint objects and data", "Limits"). The snapshot stays in the memory of the API server that
 * received its PUT, bounded and lost on restart as the seed says; that server records itself as the
 * holder in the annotation {@link DATA_HOLDER_ANNOTATION} (`<url> <instance>`), and every other API
 * server answers a GET by proxying it to the holder, as `system:kube-apiserver`. See docs/etcd.md.
 */
import { randomUUID } from 'node:crypto';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { ServerContext } from './handlers/context.ts';
import type { Storage } from './storage/index.ts';

/** Annotation of a Checkpoint naming the API server that holds its data: `<url> <instance id>`. */
export const DATA_HOLDER_ANNOTATION = 'kube32.io/checkpoint-data-holder';
/** Header of a proxied GET: the holder instance it is meant for; the receiver never proxies it further. */
export const HOLDER_INSTANCE_HEADER = 'x-kube32-data-holder-instance';

/** This API server as a holder of checkpoint data. */
export interface CheckpointDataPeers {
  /** This server's URL as peers reach it (`https://127.0.0.1:6443`). */
  readonly selfUrl: string;
  /** Random id of this process: a restarted server is another holder, which holds nothing. */
  readonly instance: string;
  /** The annotation's value naming this server. */
  readonly holder: string;
  /** Stops following Checkpoint deletions. */
  stop(): void;
}

/** A parsed {@link DATA_HOLDER_ANNOTATION}. */
export interface DataHolder {
  url: string;
  instance: string;
}

const peersOf = new WeakMap<ServerContext, CheckpointDataPeers & { caCertPem: string | undefined }>();

/**
 * Makes this API server a peer: it names itself in the annotations of the data it stores, and drops
 * its copy of a Checkpoint's data when any API server deletes the Checkpoint (a watch on the
 * storage, since the deletion may go through another server).
 * @param opts.selfUrl the URL other API servers reach this one at
 * @param opts.caCertPem the CA that signs the peers' serving certificates (shared PKI), or undefined for plain HTTP
 */
export function attachCheckpointDataPeers(ctx: ServerContext, storage: Storage, opts: { selfUrl: string; caCertPem: string | undefined }): CheckpointDataPeers {
  const instance = randomUUID();
  const watch = storage.watch('checkpoints.kube32.io', storage.currentResourceVersion(), (e) => {
    if (e.type !== 'DELETED') return;
    const held = ctx.checkpointData.get(`${e.namespace}/${e.name}`, e.object.metadata.uid);
    if (held) ctx.checkpointData.delete(`${e.namespace}/${e.name}`);
  });
  const peers = { selfUrl: opts.selfUrl, instance, holder: `${opts.selfUrl} ${instance}`, caCertPem: opts.caCertPem, stop: () => watch.stop() };
  peersOf.set(ctx, peers);
  return peers;
}

/** The peers of `ctx`, or undefined for a server started without them (a single API server). */
export function checkpointDataPeers(ctx: ServerContext): CheckpointDataPeers | undefined {
  return peersOf.get(ctx);
}

/** Parses the holder annotation; undefined when absent or malformed. */
export function parseDataHolder(value: string | undefined): DataHolder | undefined {
  const m = /^(https?:\/\/\S+) (\S+)$/.exec(value ?? '');
  return m ? { url: m[1]!, instance: m[2]! } : undefined;
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
