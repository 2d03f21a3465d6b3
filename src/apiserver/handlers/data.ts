/**
 * Binary subresources: a Checkpoint's snapshot (`checkpoints/<name>/data`, seed 002 "Checkpoint
 * objects and data": PUT checked while it streams, 422 when not K32S, 413 over the whole space;
 * GET the bytes or 404; POST takes the snapshot from the pod's node into the data, see {@link captureFromNode})
 * and blobs by digest
 * (`/apis/kube32.io/v1/blobs/<sha256>`). With several API servers the data is copied to every live
 * peer and a GET of data held only elsewhere is proxied (`../checkpoint-data-peers.ts`, docs/etcd.md).
 */
import { type IncomingMessage, request as httpRequest, type ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import { checkpointDataPeers, DATA_HOLDER_ANNOTATION, fetchFromHolder, formatDataHolders, HOLDER_INSTANCE_HEADER, parseDataHolders, REPLICA_HEADER, replicateToPeers } from '../checkpoint-data-peers.ts';
import { ApiError, badRequest, notFound } from '../errors.ts';
import { checkpoints } from '../registry/checkpoints/index.ts';
import { nodes } from '../registry/nodes/index.ts';
import { K32SError, SnapshotDecoder, type DecodedSnapshot, toHex } from '../../k32s/index.ts';
import { rec } from '../registry/util.ts';
import type { AtomicFileWriter } from '../../lib/index.ts';
import type { RequestScope, ServerContext } from './context.ts';
import { mediaType, sendJson } from './http.ts';
import { kubeletAddress } from './proxy.ts';
import { SnapshotPush } from './data-push.ts';

/**
 * Header of an answer to `POST .../checkpoints/<name>/data` that is the kubelet's own (it sent no snapshot):
 * the kubelet's status code. Without it an error is the API server's.
 */
export const NODE_STATUS_HEADER = 'X-Kube32-Node-Status';

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

/**
 * Sends a Checkpoint's data with its `ETag` (its K32S trailer, the SHA-256 of the bytes before it), or 304
 * when the request's `If-None-Match` names it (a kubelet that holds those bytes already: issue 26).
 */
function sendData(req: IncomingMessage, res: ServerResponse, bytes: Uint8Array, headers: Record<string, string>): void {
  const etag = `"${Buffer.from(bytes.subarray(Math.max(0, bytes.length - 32))).toString('hex')}"`;
  if (req.headers['if-none-match'] === etag) {
    res.writeHead(304, { ETag: etag, 'Cache-Control': 'no-cache, private', ...headers });
    res.end();
    return;
  }
  sendBytes(res, bytes, { ...headers, ETag: etag });
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
    const ckpt = await reg.get(checkpoints, ns, name);
    const st = rec(ckpt.status);
    const headers: Record<string, string> = {};
    if (typeof st.imageSha256 === 'string') headers['X-Kube32-Image-Sha256'] = st.imageSha256;
    if (typeof st.snapshotSha256 === 'string') headers['X-Kube32-Snapshot-Sha256'] = st.snapshotSha256;
    if (typeof st.podTimeMs === 'number') headers['X-Kube32-Pod-Time-Ms'] = String(st.podTimeMs);
    // Where the snapshot was taken: the restoring kubelet's `Restored` event names it.
    if (typeof st.nodeName === 'string' && st.nodeName) headers['X-Kube32-Source-Node'] = st.nodeName;
    const noData = () => new ApiError('NotFound', `checkpoints.kube32.io "${name}" has no data`, { name, group: 'kube32.io', kind: 'checkpoints' });
    // Several API servers (docs/etcd.md): the annotation names the servers holding the latest data;
    // a copy held here but not named is of an older PUT. A request proxied by a peer is never proxied on.
    const peers = checkpointDataPeers(ctx);
    const holders = parseDataHolders(ckpt.metadata.annotations?.[DATA_HOLDER_ANNOTATION]);
    if (peers && holders.length > 0) {
      const named = holders.some((h) => h.instance === peers.instance);
      const local = named ? ctx.checkpointData.get(key, ckpt.metadata.uid) : undefined;
      if (local) return sendData(req, res, local, headers);
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
    return sendData(req, res, bytes, headers);
  }
  if (req.method === 'POST') return captureFromNode(scope);
  if (req.method !== 'PUT') throw new ApiError('MethodNotAllowed', `${req.method} is not supported on checkpoints/data`);
  const length = requireOctetStream(scope);
  const ckpt = await reg.get(checkpoints, ns, name);
  ctx.checkpointData.checkSize(length);
  // A failure stops the checks but the body is still read to its end (breaking a for-await would reset the connection).
  const peers = checkpointDataPeers(ctx);
  const replicaOf = req.headers[REPLICA_HEADER];
  const replica = peers !== undefined && replicaOf !== undefined;
  if (replica && scope.user.name !== 'system:kube-apiserver') throw new ApiError('Forbidden', `forbidden: User "${scope.user.name}" cannot store a copy of checkpoint data`);
  if (replica && replicaOf !== ckpt.metadata.uid) throw notFound('checkpoints', 'kube32.io', name);
  const file = ctx.checkpointData.begin(key, ckpt.metadata.uid!);
  const { buf, facts } = await readSnapshot(req, length, name, { drain: true, file });
  if (replica) {
    // A peer's copy (docs/etcd.md): kept here for the Checkpoint of that uid; the peer writes the object.
    await ctx.checkpointData.put(key, ckpt.metadata.uid!, buf, file);
    sendJson(res, 200, ckpt);
    return;
  }
  sendJson(res, 200, await storeSnapshot(scope, ckpt, buf, facts, file));
}

/** The facts of a stored snapshot that go into the Checkpoint's status. */
interface SnapshotFacts {
  sizeBytes: number;
  snapshotSha256: string;
  imageSha256: string;
  podTimeMs: number;
}

/** Bytes a snapshot's file is written in while they arrive (a write a MiB, not one an HTTP piece of 16 to 64 KiB). */
const FILE_PIECE_BYTES = 1 << 20;

function invalidData(name: string, message: string): ApiError {
  return new ApiError('Invalid', `Checkpoint.kube32.io "${name}" is invalid: data: ${message}`, {
    name,
    group: 'kube32.io',
    kind: 'Checkpoint',
    causes: [{ reason: 'FieldValueInvalid', message, field: 'data' }],
  });
}

/**
 * Reads a K32S snapshot of `length` bytes into one buffer, checking magic, version, sections and trailer as
 * the bytes arrive (memory is hashed, not kept twice), and writing them to `opts.file` as they come (which is
 * aborted when they are refused).
 * @param opts.drain on a failure, read the body to its end anyway (a client's request: breaking a for-await
 *   would reset its connection); otherwise stop at once
 * @throws ApiError Invalid (422) naming the cause when the bytes are not a whole K32S snapshot of that length
 */
async function readSnapshot(
  body: AsyncIterable<unknown>,
  length: number,
  name: string,
  opts: { drain: boolean; file?: AtomicFileWriter | undefined; push?: SnapshotPush | undefined },
): Promise<{ buf: Buffer; facts: SnapshotFacts }> {
  const buf = Buffer.allocUnsafe(length);
  let off = 0;
  /** Bytes given to `opts.file` and `opts.push` so far. */
  let written = 0;
  let snap: DecodedSnapshot | undefined;
  let failure: unknown;
  const decoder = new SnapshotDecoder({ memory: 'discard' });
  try {
    for await (const c of body) {
      const chunk = c as Buffer;
      if (failure) continue;
      try {
        if (off + chunk.length > length) throw invalidData(name, `the body is longer than its Content-Length (${length} bytes)`);
        decoder.push(chunk);
        chunk.copy(buf, off);
        off += chunk.length;
        // Written to the data dir (and sent on to a move's target) as it comes, a MiB at a time (the
        // buffer's bytes, which stay as they are): one write a MiB, not one an HTTP piece.
        if (off - written >= FILE_PIECE_BYTES) {
          opts.file?.write(buf.subarray(written, off), written);
          opts.push?.write(buf.subarray(written, off));
          written = off;
        }
      } catch (err: unknown) {
        failure = err;
        if (!opts.drain) break;
      }
    }
  } catch (err: unknown) {
    // The body itself failed (the connection broke): nothing is kept.
    opts.push?.abort();
    await opts.file?.abort();
    throw err;
  }
  if (!failure) {
    try {
      if (off !== length) throw invalidData(name, `the body ended after ${off} of ${length} bytes`);
      snap = decoder.end();
      if (off > written) {
        opts.file?.write(buf.subarray(written, off), written);
        opts.push?.write(buf.subarray(written, off));
      }
    } catch (err: unknown) {
      failure = err;
    }
  }
  if (failure || !snap) {
    opts.push?.abort();
    await opts.file?.abort();
    if (failure instanceof K32SError) throw invalidData(name, failure.message);
    throw failure;
  }
  opts.push?.end();
  return {
    buf,
    facts: { sizeBytes: length, snapshotSha256: toHex(snap.snapshotSha256), imageSha256: toHex(snap.header.imageSha256), podTimeMs: Number(snap.header.podTimeMs) },
  };
}

/**
 * Keeps `buf` as the data of `ckpt` (dropping the oldest other snapshots to make room), copies it to the live
 * peers when there are several API servers, and writes the facts into the Checkpoint's status.
 * @returns the Checkpoint as written
 * @throws ApiError NotFound when the Checkpoint went (or was replaced) meanwhile: its data is then dropped
 */
async function storeSnapshot(
  scope: RequestScope,
  ckpt: Awaited<ReturnType<ServerContext['registry']['get']>>,
  buf: Buffer,
  facts: SnapshotFacts & { nodeName?: string },
  file?: AtomicFileWriter,
): Promise<unknown> {
  const { ctx } = scope;
  const reg = ctx.registry;
  const ns = scope.info.namespace ?? '';
  const name = scope.info.name!;
  const key = `${ns}/${name}`;
  const peers = checkpointDataPeers(ctx);
  const dropped = await ctx.checkpointData.put(key, ckpt.metadata.uid!, buf, file);
  ctx.log.debug({ checkpoint: key }, 'checkpoint data: written to disk');
  if (dropped.length) ctx.log.info({ dropped, stored: key }, 'checkpoint data: dropped the oldest snapshots to make room');
  const holders = peers ? [{ url: peers.selfUrl, instance: peers.instance }, ...(await replicateToPeers(ctx, scope.url.pathname, ckpt.metadata.uid!, buf))] : [];
  try {
    return await reg.serverUpdate(checkpoints, ns, name, (o) => {
      if (o.metadata.uid !== ckpt.metadata.uid) throw notFound('checkpoints', 'kube32.io', name);
      if (peers) o.metadata.annotations = { ...o.metadata.annotations, [DATA_HOLDER_ANNOTATION]: formatDataHolders(holders) };
      o.status = { ...rec(o.status), ...facts };
      return o;
    });
  } catch (err: unknown) {
    // The Checkpoint went (or was replaced) meanwhile: its facts were not written, so neither is its data kept.
    ctx.checkpointData.delete(key);
    throw err;
  }
}

/**
 * `POST .../checkpoints/<name>/data?node=<node>&container=<container>&leave=running|frozen&timeoutMs=<ms>[&target=<node>]`:
 * the API server takes the snapshot of the Checkpoint's pod (`spec.podName`) from the kubelet of `node`
 * (its `POST /checkpoint/...`, seed "Kubelet endpoints", the way the node proxy reaches it) and stores it as
 * the Checkpoint's data, as a PUT of the same bytes would. The bytes cross one hop instead of three (kubelet
 * → node proxy → client → PUT), which is what a move's freeze-to-Running time is made of for large pods.
 *
 * Answers: 200 and the Checkpoint with its data facts; the kubelet's own answer when it does not send a
 * snapshot (404, 409 `NotMovable`, 504 `Timeout`, ...: status and body as the kubelet sent them), marked with
 * the header {@link NODE_STATUS_HEADER}; 503 when the node cannot be reached; 422 or 413 as for a PUT when the
 * snapshot is not a whole K32S one or does not fit (the pod is then frozen if `leave=frozen`: the caller thaws).
 *
 * With `target` (a move's target node), the bytes also go on to that node's kubelet as they are read
 * ({@link SnapshotPush}, issue 26), which stages them for the replacement's restore; the answer is the same.
 */
async function captureFromNode(scope: RequestScope): Promise<void> {
  const { req, res, ctx, info, url } = scope;
  const reg = ctx.registry;
  const ns = info.namespace ?? '';
  const name = info.name!;
  const q = url.searchParams;
  const nodeName = q.get('node') ?? '';
  const container = q.get('container') ?? '';
  if (!nodeName) throw badRequest('node is required: the node whose kubelet takes the snapshot');
  if (!container) throw badRequest('container is required: the container of the pod to snapshot');
  const pushTo = q.get('target') ?? '';
  const leave = q.get('leave') ?? 'running';
  if (leave !== 'running' && leave !== 'frozen') throw badRequest(`leave must be "running" or "frozen": current value is "${leave}"`);
  const timeout = q.get('timeoutMs') ?? '10000';
  if (!/^\d+$/.test(timeout) || Number(timeout) < 1 || Number(timeout) > 60_000) throw badRequest(`timeoutMs must be a whole number of ms from 1 to 60000: current value is "${timeout}"`);
  const ckpt = await reg.get(checkpoints, ns, name);
  const podName = rec(ckpt.spec).podName;
  if (typeof podName !== 'string' || !podName) throw invalidData(name, 'the Checkpoint has no spec.podName to take the snapshot of');
  const target = kubeletAddress(await reg.get(nodes, '', nodeName));
  // digest=false: the node sends no SHA-256 ahead of the bytes (a hashing pass before the first byte);
  // the decoder below hashes them as they arrive and checks the trailer.
  const path = `/checkpoint/${encodeURIComponent(ns)}/${encodeURIComponent(podName)}/${encodeURIComponent(container)}?leave=${leave}&timeoutMs=${timeout}&digest=false`;
  req.resume();
  const up = await new Promise<IncomingMessage>((resolve, reject) => {
    const r = httpRequest({ host: target.host, port: target.port, method: 'POST', path, headers: { authorization: `Bearer ${ctx.kubeletToken}` } });
    r.on('response', resolve);
    r.on('error', (err) => reject(new ApiError('ServiceUnavailable', `error trying to reach the kubelet of node "${nodeName}": ${err.message}`)));
    res.on('close', () => {
      if (!res.writableFinished) r.destroy();
    });
    r.end();
  });
  if (up.statusCode !== 200) {
    // The node's refusal, as it sent it (a `metav1.Status` with `blockers`).
    const headers: Record<string, string> = { [NODE_STATUS_HEADER]: String(up.statusCode ?? 502) };
    if (up.headers['content-type']) headers['Content-Type'] = up.headers['content-type'];
    if (up.headers['content-length']) headers['Content-Length'] = up.headers['content-length'];
    res.writeHead(up.statusCode ?? 502, headers);
    await pipeline(up, res);
    return;
  }
  const len = up.headers['content-length'];
  ctx.log.debug({ checkpoint: `${ns}/${name}`, bytes: Number(len) }, 'checkpoint data: snapshot streaming from the node');
  try {
    if (len === undefined || !/^\d+$/.test(len)) throw new ApiError('InternalError', `the kubelet of node "${nodeName}" sent the snapshot without a Content-Length`);
    ctx.checkpointData.checkSize(Number(len));
    // Stored as it streams in: the data dir's file is written while the bytes arrive, fsynced at the end.
    const file = ctx.checkpointData.begin(`${ns}/${name}`, ckpt.metadata.uid!);
    const push = pushTo ? await SnapshotPush.open(ctx, { node: pushTo, namespace: ns, pod: podName, container, checkpoint: name }, Number(len)) : undefined;
    const { buf, facts } = await readSnapshot(up, Number(len), name, { drain: false, file, push });
    ctx.log.debug({ checkpoint: `${ns}/${name}` }, 'checkpoint data: snapshot read');
    // Taken on that node: status.nodeName says so when no controller did (a Checkpoint made by hand).
    const where = typeof rec(ckpt.status).nodeName === 'string' ? {} : { nodeName };
    const stored = await storeSnapshot(scope, ckpt, buf, { ...facts, ...where }, file);
    ctx.log.debug({ checkpoint: `${ns}/${name}` }, 'checkpoint data: stored');
    sendJson(res, 200, stored);
  } finally {
    up.destroy();
  }
}

/** Serves `GET /apis/kube32.io/v1/blobs/<sha256>`. */
export async function serveBlob(ctx: ServerContext, res: ServerResponse, sha: string): Promise<void> {
  if (!/^[0-9a-f]{64}$/.test(sha)) throw badRequest(`"${sha}" is not a SHA-256 digest (64 lowercase hex digits)`);
  const bytes = await ctx.registry.storage.getBlob(sha);
  if (!bytes) throw new ApiError('NotFound', `blob "${sha}" not found`, { name: sha, group: 'kube32.io', kind: 'blobs' });
  sendBytes(res, bytes, { 'X-Kube32-Image-Sha256': sha });
}
