/**
 * GETs and LISTs served from the watch cache (storage/cacher.ts), with kube-apiserver's
 * resourceVersion semantics (api-concepts "Semantics for get and list"):
 *
 * - `resourceVersion` unset: the latest state, consistent (the cache first waits until it has seen
 *   the store's current revision; when it cannot within 3 s, the store answers, as kube falls back
 *   to etcd);
 * - `"0"`: whatever the cache holds now;
 * - `N` (NotOlderThan, the default match): once the cache has seen N (504 Timeout "Too large
 *   resource version" after 3 s); `resourceVersionMatch=Exact`: the state at N, from the cache's
 *   window (410 Expired when N is older);
 * - `continue`: the next page of the state the first page was read at (410 Expired once that state
 *   has left the window), so a paged list returns each object exactly once.
 *
 * Answers are the objects' stored JSON bytes, made once per object; a large JSON list is streamed
 * in pieces rather than joined into one string.
 */
import type { ServerResponse } from 'node:http';
import { ApiError, badRequest, notFound } from '../errors.ts';
import { withTypeMeta } from '../registry/meta.ts';
import { apiVersionOf, type ResourceDef, storageKey } from '../registry/types.ts';
import { type CacheIndex, type CachedObject, INDEXED_FIELDS, type ResourceCache } from '../storage/cacher.ts';
import { parseFieldSelector } from '../registry/selectors.ts';
import { StorageError } from '../storage/index.ts';
import type { RequestScope, ServerContext } from './context.ts';
import { sendJson, sendRawJson, wantsPartial, wantsTable } from './http.ts';
import { type IncludeObject, partialMetadata, toTable } from './table.ts';

/** How long a read waits for the cache to reach a resourceVersion, ms (kube's 3 s). */
export const WAIT_MS = 3000;
/** A JSON list at least this long is streamed (chunked) rather than sent in one piece. */
const STREAM_BYTES = 1 << 20;

/** `{"apiVersion":"v1","kind":"Pod",`: the start of the encoding of `def`'s objects. */
export function typePrefix(def: ResourceDef): string {
  return `{"apiVersion":"${apiVersionOf(def)}","kind":"${def.kind}",`;
}

/** The cache of `def`'s stored resource, or undefined when the server runs without one. */
export async function cacheOf(ctx: ServerContext, def: ResourceDef): Promise<ResourceCache | undefined> {
  if (!ctx.cacher) return undefined;
  const stored = def.storedAs?.def ?? def;
  const field = INDEXED_FIELDS[storageKey(def)];
  const read = field !== undefined ? stored.fieldSelectors?.[field] : undefined;
  const index: CacheIndex | undefined = field !== undefined && read ? { field, read: (o) => read(o) ?? '' } : undefined;
  return ctx.cacher.cache(storageKey(def), typePrefix(stored), index);
}

/**
 * The value of `cache`'s indexed field that `fieldSelector` requires (`spec.nodeName=node-1`, alone or
 * with other terms), or undefined when it requires none (no index, no such term, only `!=`).
 * @throws ApiError BadRequest for a selector that does not parse
 */
export function indexValueOf(cache: ResourceCache, fieldSelector: string | undefined): string | undefined {
  if (!cache.index || !fieldSelector) return undefined;
  for (const f of parseFieldSelector(fieldSelector)) if (f.field === cache.index.field && f.op === '=') return f.value;
  return undefined;
}

/** kube's 504 Timeout for a resourceVersion the cache does not reach within {@link WAIT_MS}. */
export function tooLarge(rv: number, current: number): ApiError {
  return new ApiError('Timeout', `Too large resource version: ${rv}, current: ${current}`, { causes: [{ reason: 'ResourceVersionTooLarge', message: 'Too large resource version' }], retryAfterSeconds: 1 }, { headers: { 'Retry-After': '1' } });
}

function invalidListOptions(field: string, message: string): ApiError {
  return new ApiError('Invalid', `ListOptions.meta.k8s.io "" is invalid: ${field}: Forbidden: ${message}`, { group: 'meta.k8s.io', kind: 'ListOptions', causes: [{ reason: 'FieldValueForbidden', message: `Forbidden: ${message}`, field }] });
}

/** A continue token: the version of the first page and the last key (`namespace/name`) sent. */
export function encodeContinue(rv: number, o: CachedObject): string {
  return Buffer.from(JSON.stringify({ rv, start: `${o.object.metadata.namespace ?? ''}/${o.object.metadata.name ?? ''}` })).toString('base64url');
}

/**
 * The version and cache key a continue token names.
 * @throws ApiError BadRequest for a token that does not decode
 */
export function decodeContinue(token: string): { rv: number; after: string } {
  try {
    const tok = JSON.parse(Buffer.from(token, 'base64url').toString()) as { rv?: unknown; start?: unknown };
    const start = String(tok.start);
    const slash = start.indexOf('/');
    const rv = Number(tok.rv);
    if (slash < 0 || !Number.isInteger(rv) || rv < 0) throw new Error('bad token');
    return { rv, after: `${start.slice(0, slash)}\0${start.slice(slash + 1)}` };
  } catch {
    throw badRequest('continue key is not valid: illegal base64 data');
  }
}

/**
 * The version a read is served at, after waiting as its `resourceVersion` asks; undefined when the
 * cache cannot serve it consistently (the caller reads the store).
 * @throws ApiError BadRequest, Invalid (422) for bad options; Timeout (504) for a version the cache does not reach
 */
async function readVersion(ctx: ServerContext, cache: ResourceCache, rvParam: string, match: string): Promise<{ atRv?: number } | undefined> {
  if (rvParam !== '' && !/^\d+$/.test(rvParam)) throw badRequest(`invalid resource version: ${rvParam}`);
  if (match !== '' && match !== 'NotOlderThan' && match !== 'Exact') {
    throw new ApiError('Invalid', `ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Unsupported value: "${match}": supported values: "Exact", "NotOlderThan", ""`, { group: 'meta.k8s.io', kind: 'ListOptions' });
  }
  if (match !== '' && rvParam === '') throw invalidListOptions('resourceVersionMatch', 'resourceVersionMatch is forbidden unless resourceVersion is provided');
  if (match === 'Exact' && rvParam === '0') throw invalidListOptions('resourceVersionMatch', 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"');
  const cacher = ctx.cacher!;
  if (rvParam === '') return (await cacher.sync(WAIT_MS)) ? {} : undefined;
  if (rvParam === '0') return {};
  const rv = Number(rvParam);
  if (!(await cacher.waitFor(rv, WAIT_MS))) throw tooLarge(rv, cache.rv);
  return match === 'Exact' ? { atRv: rv } : {};
}

/**
 * Serves a GET of one object from the cache; answers false when the store must answer instead.
 * @throws ApiError NotFound, and readVersion's
 */
export async function serveCachedGet(scope: RequestScope, cache: ResourceCache, namespace: string, name: string, include: IncludeObject): Promise<boolean> {
  const { req, res, url, ctx, info } = scope;
  const def = info.def!;
  const at = await readVersion(ctx, cache, url.searchParams.get('resourceVersion') ?? '', '');
  if (!at) return false;
  const o = cache.get(namespace, name);
  if (!o) throw notFound(def.plural, def.group, name);
  if (wantsTable(req)) sendJson(res, 200, toTable(def, [withTypeMeta(def, o.object)], o.object.metadata.resourceVersion ?? '', include, new Date()));
  else if (wantsPartial(req)) sendJson(res, 200, partialMetadata(withTypeMeta(def, o.object)));
  else sendRawJson(res, 200, o.json);
  return true;
}

/**
 * Serves a LIST from the cache; answers false when the store must answer instead. A converted
 * resource (`def.storedAs`, events.k8s.io) is read from its stored resource's cache and converted.
 * @throws ApiError BadRequest (selectors, continue, versions), Invalid, Timeout, Expired (410)
 */
export async function serveCachedList(scope: RequestScope, cache: ResourceCache, include: IncludeObject): Promise<boolean> {
  const { req, res, url, ctx, info } = scope;
  const def = info.def!;
  const q = url.searchParams;
  const limitParam = q.get('limit');
  if (limitParam !== null && !/^\d+$/.test(limitParam)) throw badRequest(`invalid limit: ${limitParam}`);
  const labelSelector = q.get('labelSelector') || undefined;
  const fieldSelector = q.get('fieldSelector') || undefined;
  // A converted resource's selectors name the stored fields (handlers/converted.ts).
  const matcher = labelSelector || fieldSelector ? ctx.registry.matcher(def.storedAs?.def ?? def, { labelSelector, fieldSelector }) : undefined;
  const rvParam = q.get('resourceVersion') ?? '';
  const match = q.get('resourceVersionMatch') ?? '';
  const token = q.get('continue') || undefined;
  let atRv: number | undefined;
  let after: string | undefined;
  if (token) {
    if (match !== '') throw invalidListOptions('resourceVersionMatch', 'resourceVersionMatch is forbidden when continue is provided');
    if (rvParam !== '' && rvParam !== '0') throw badRequest('specifying resource version is not allowed when using continue');
    ({ rv: atRv, after } = decodeContinue(token));
    if (atRv > cache.rv && !(await ctx.cacher!.waitFor(atRv, WAIT_MS))) throw tooLarge(atRv, cache.rv);
  } else {
    const at = await readVersion(ctx, cache, rvParam, match);
    if (!at) return false;
    atRv = at.atRv;
  }
  let page: ReturnType<ResourceCache['list']>;
  try {
    page = cache.list({ namespace: def.namespaced ? info.namespace : undefined, atRv, after, limit: limitParam ? Number(limitParam) : undefined, index: indexValueOf(cache, fieldSelector), match: matcher });
  } catch (err: unknown) {
    if (err instanceof StorageError && err.code === 'Expired') {
      if (token) throw new ApiError('Expired', 'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.');
      throw new ApiError('Expired', err.message);
    }
    throw err;
  }
  const metadata: Record<string, unknown> = { resourceVersion: String(page.rv) };
  const last = page.items[page.items.length - 1];
  if (page.more && last) metadata.continue = encodeContinue(page.rv, last);
  if (page.more && page.remaining !== undefined) metadata.remainingItemCount = page.remaining;
  if (wantsTable(req)) {
    // A converted resource's Table reads its stored objects (./table.ts).
    sendJson(res, 200, toTable(def, page.items.map((o) => (def.storedAs ? o.object : withTypeMeta(def, o.object))), String(page.rv), include, new Date(), { continue: metadata.continue as string | undefined, remainingItemCount: metadata.remainingItemCount as number | undefined }));
    return true;
  }
  if (wantsPartial(req)) {
    sendJson(res, 200, { kind: 'PartialObjectMetadataList', apiVersion: 'meta.k8s.io/v1', metadata, items: page.items.map((o) => partialMetadata(withTypeMeta(def, o.object))) });
    return true;
  }
  if (def.storedAs) {
    const conv = def.storedAs;
    sendJson(res, 200, { kind: def.listKind, apiVersion: apiVersionOf(def), metadata, items: page.items.map((o) => withTypeMeta(def, conv.fromStored(o.object))) });
    return true;
  }
  await sendList(res, `{"kind":"${def.listKind}","apiVersion":"${apiVersionOf(def)}","metadata":${JSON.stringify(metadata)},"items":[`, page.items);
  return true;
}

/** Writes a JSON list of cached objects: in one piece when small, else streamed in pieces of ~256 KiB, waiting for the socket to drain. */
async function sendList(res: ServerResponse, head: string, items: CachedObject[]): Promise<void> {
  let size = head.length + 2;
  for (const o of items) {
    size += o.json.length + 1;
    if (size >= STREAM_BYTES) break;
  }
  if (size < STREAM_BYTES) {
    sendRawJson(res, 200, `${head}${items.map((o) => o.json).join(',')}]}`);
    return;
  }
  res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache, private', 'Transfer-Encoding': 'chunked' });
  let piece = head;
  for (let i = 0; i < items.length; i++) {
    if (i > 0) piece += ',';
    piece += items[i]!.json;
    if (piece.length >= 256 * 1024) {
      const ok = res.write(piece);
      piece = '';
      if (!ok) {
        if (res.destroyed) return;
        await new Promise<void>((resolve) => {
          const done = () => {
            res.off('drain', done);
            res.off('close', done);
            resolve();
          };
          res.on('drain', done);
          res.on('close', done);
        });
        if (res.destroyed) return;
      }
    }
  }
  res.end(`${piece}]}`);
}
