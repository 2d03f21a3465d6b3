/**
 * Binary subresources: a Checkpoint's snapshot (`checkpoints/<name>/data`, seed 002 "Checkpoint
 * objects and data": PUT checked while it streams, 422 when not K32S, 413 over the whole space;
 * GET the bytes or 404) and blobs by digest
 * (`/apis/kube32.io/v1/blobs/<sha256>`). With several API servers the data is copied to every live
 * peer and a GET of data held only elsewhere is proxied (`../checkpoint-data-peers.ts`, docs/etcd.md).
 */
import type { ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { checkpointDataPeers, DATA_HOLDER_ANNOTATION, fetchFromHolder, formatDataHolders, HOLDER_INSTANCE_HEADER, parseDataHolders, REPLICA_HEADER, replicateToPeers } from '../checkpoint-data-peers.ts';
import { ApiError, badRequest, notFound } from '../errors.ts';
import { checkpoints } from '../registry/checkpoints/index.ts';
import { K32SError, SnapshotDecoder, type DecodedSnapshot, toHex } from '../../k32s/index.ts';
import { rec } from '../registry/util.ts';
import type { RequestScope, ServerContext } from './context.ts';
import { mediaType, sendJson } from './http.ts';

/** Default limit of a module's bytes: 64 MiB. */
export const DEFAULT_MAX_MODULE_BYTES = 64 * 1024 * 1024;

function requireOctetStream(scope: RequestScope): number {
  const type = mediaType(scope.req);
  if (type !== 'application/octet-stream') {
    throw new ApiError('UnsupportedMediaType', `the data must be sent as application/octet-stream, not ${type}`);
  }
  const len = scope.req.headers['content-length'];
  if (len === undefined || !/^\d+$/.test(len)) throw badRequest('the data must be sent with a Content-Length');
  return Number(len);
}

function sendBytes(res: ServerResponse, bytes: Uint8Array, headers: Record<string, string> = {}): void {
  res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': bytes.byteLength, 'Cache-Control': 'no-cache, private', ...headers });
  res.end(bytes);
}

/** Serves GET and PUT of a Checkpoint's data. */
export async function serveCheckpointData(scope: RequestScope): Promise<void> {
  const { req, res, ctx, info } = scope;
  const reg = ctx.registry;
  const ns = info.namespace ?? '';
  const name = info.name!;
  const key = `${ns}/${name}`;
  if (req.method === 'GET') {
    const ckpt = reg.get(checkpoints, ns, name);
    const st = rec(ckpt.status);
    const headers: Record<string, string> = {};
    if (typeof st.imageSha256 === 'string') headers['X-Kube32-Image-Sha256'] = st.imageSha256;
    if (typeof st.snapshotSha256 === 'string') headers['X-Kube32-Snapshot-Sha256'] = st.snapshotSha256;
    if (typeof st.podTimeMs === 'number') headers['X-Kube32-Pod-Time-Ms'] = String(st.podTimeMs);
    const noData = () => new ApiError('NotFound', `checkpoints.kube32.io "${name}" has no data`, { name, group: 'kube32.io', kind: 'checkpoints' });
    // Several API servers (docs/etcd.md): the annotation names the servers holding the latest data;
    // a copy held here but not named is of an older PUT. A request proxied by a peer is never proxied on.
    const peers = checkpointDataPeers(ctx);
    const holders = parseDataHolders(ckpt.metadata.annotations?.[DATA_HOLDER_ANNOTATION]);
    if (peers && holders.length > 0) {
      const named = holders.some((h) => h.instance === peers.instance);
      const local = named ? ctx.checkpointData.get(key, ckpt.metadata.uid) : undefined;
      if (local) return sendBytes(res, local, headers);
      if (!named) ctx.checkpointData.delete(key);
      if (req.headers[HOLDER_INSTANCE_HEADER] !== undefined) throw noData();
      for (const holder of holders.filter((h) => h.instance !== peers.instance)) {
        const up = await fetchFromHolder(ctx, holder, scope.url.pathname);
        if (up?.statusCode !== 200) {
          up?.resume();
          continue;
        }
        res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': up.headers['content-length'] ?? '', 'Cache-Control': 'no-cache, private', ...headers });
        await pipeline(up, res);
        return;
      }
      throw noData();
    }
    const bytes = ctx.checkpointData.get(key, ckpt.metadata.uid);
    if (!bytes) throw noData();
    return sendBytes(res, bytes, headers);
  }
  if (req.method !== 'PUT') throw new ApiError('MethodNotAllowed', `${req.method} is not supported on checkpoints/data`);
  const length = requireOctetStream(scope);
  const ckpt = reg.get(checkpoints, ns, name);
  ctx.checkpointData.checkSize(length);
  const buf = Buffer.allocUnsafe(length);
  let off = 0;
  const fail = (message: string) => {
    return new ApiError('Invalid', `Checkpoint.kube32.io "${name}" is invalid: data: ${message}`, {
      name,
      group: 'kube32.io',
      kind: 'Checkpoint',
      causes: [{ reason: 'FieldValueInvalid', message, field: 'data' }],
    });
  };
  // The K32S reader checks magic, version, sections and trailer as the bytes arrive; memory is hashed, not kept twice.
  // A failure stops the checks but the body is still read to its end (breaking a for-await would reset the connection).
  let snap: DecodedSnapshot | undefined;
  let failure: unknown;
  const decoder = new SnapshotDecoder({ memory: 'discard' });
  for await (const c of req) {
    const chunk = c as Buffer;
    if (failure) continue;
    try {
      if (off + chunk.length > length) throw fail(`the body is longer than its Content-Length (${length} bytes)`);
      decoder.push(chunk);
      chunk.copy(buf, off);
      off += chunk.length;
    } catch (err: unknown) {
      failure = err;
    }
  }
  if (!failure) {
    try {
      if (off !== length) throw fail(`the body ended after ${off} of ${length} bytes`);
      snap = decoder.end();
    } catch (err: unknown) {
      failure = err;
    }
  }
  if (failure || !snap) {
    if (failure instanceof K32SError) throw fail(failure.message);
    throw failure;
  }
  const facts = { sizeBytes: length, snapshotSha256: toHex(snap.snapshotSha256), imageSha256: toHex(snap.header.imageSha256), podTimeMs: Number(snap.header.podTimeMs) };
  const peers = checkpointDataPeers(ctx);
  const replicaOf = req.headers[REPLICA_HEADER];
  if (peers && replicaOf !== undefined) {
    // A peer's copy (docs/etcd.md): kept here for the Checkpoint of that uid; the peer writes the object.
    if (scope.user.name !== 'system:kube-apiserver') throw new ApiError('Forbidden', `forbidden: User "${scope.user.name}" cannot store a copy of checkpoint data`);
    if (replicaOf !== ckpt.metadata.uid) throw notFound('checkpoints', 'kube32.io', name);
    ctx.checkpointData.put(key, ckpt.metadata.uid!, buf);
    sendJson(res, 200, ckpt);
    return;
  }
  const dropped = ctx.checkpointData.put(key, ckpt.metadata.uid!, buf);
  if (dropped.length) ctx.log.info({ dropped, stored: key }, 'checkpoint data: dropped the oldest snapshots to make room');
  const holders = peers ? [{ url: peers.selfUrl, instance: peers.instance }, ...(await replicateToPeers(ctx, scope.url.pathname, ckpt.metadata.uid!, buf))] : [];
  let updated: ReturnType<typeof reg.serverUpdate>;
  try {
    updated = reg.serverUpdate(checkpoints, ns, name, (o) => {
      if (o.metadata.uid !== ckpt.metadata.uid) throw notFound('checkpoints', 'kube32.io', name);
      if (peers) o.metadata.annotations = { ...o.metadata.annotations, [DATA_HOLDER_ANNOTATION]: formatDataHolders(holders) };
      o.status = { ...rec(o.status), sizeBytes: facts.sizeBytes, snapshotSha256: facts.snapshotSha256, imageSha256: facts.imageSha256, podTimeMs: facts.podTimeMs };
      return o;
    });
  } catch (err: unknown) {
    // The Checkpoint went (or was replaced) meanwhile: its facts were not written, so neither is its data kept.
    ctx.checkpointData.delete(key);
    throw err;
  }
  sendJson(res, 200, updated);
}

/** Serves `GET /apis/kube32.io/v1/blobs/<sha256>`. */
export function serveBlob(ctx: ServerContext, res: ServerResponse, sha: string): void {
  if (!/^[0-9a-f]{64}$/.test(sha)) throw badRequest(`"${sha}" is not a SHA-256 digest (64 lowercase hex digits)`);
  const bytes = ctx.registry.storage.getBlob(sha);
  if (!bytes) throw new ApiError('NotFound', `blob "${sha}" not found`, { name: sha, group: 'kube32.io', kind: 'blobs' });
  sendBytes(res, bytes, { 'X-Kube32-Image-Sha256': sha });
}
