/**
 * Watch (`?watch=true`): a chunked stream of `{"type","object"}` lines, one per event, flushed at
 * once (kubectl-wire §2.3). From `resourceVersion` 0 or empty the current objects come first as
 * ADDED; from a number, every later event; past the watch window an ERROR event with a 410 Expired
 * Status ends the stream. Label and field selectors turn changes into ADDED/DELETED as objects
 * enter or leave the selection. Bookmarks (`allowWatchBookmarks`) or bare newlines keep quiet
 * streams alive.
 */
import { ApiError, badRequest } from '../errors.ts';
import type { KubeObject, StorageEvent, WatchHandle } from '../storage/index.ts';
import { StorageError } from '../storage/index.ts';
import { withTypeMeta } from '../registry/meta.ts';
import { apiVersionOf, storageKey } from '../registry/types.ts';
import type { RequestScope } from './context.ts';
import { wantsTable } from './http.ts';
import { type IncludeObject, toTable } from './table.ts';

/**
 * The JSON line of an event, made once per event, type and form (the plain object of a
 * group/version, or a Table of given options) and shared by every watcher of that form: a write
 * fanned out to 100 watchers is serialized once.
 */
const lineCache = new WeakMap<KubeObject, Map<string, Buffer>>();

function plainLine(type: string, obj: KubeObject, form: string, encode: () => unknown): Buffer {
  let byType = lineCache.get(obj);
  if (!byType) {
    byType = new Map();
    lineCache.set(obj, byType);
  }
  const key = `${type} ${form}`;
  let line = byType.get(key);
  if (line === undefined) {
    line = Buffer.from(`${JSON.stringify({ type, object: encode() })}\n`);
    byType.set(key, line);
  }
  return line;
}

/** Bytes a slow watcher may have unsent before its stream is closed. */
const MAX_BUFFERED_BYTES = 32 * 1024 * 1024;

/**
 * Serves one watch request.
 * @throws ApiError BadRequest for bad selectors or resourceVersion (before the stream starts)
 */
export async function serveWatch(scope: RequestScope, filter?: (o: KubeObject) => boolean): Promise<void> {
  const { req, res, url, ctx, info } = scope;
  const def = info.def!;
  const q = url.searchParams;
  const match = ctx.registry.matcher(def, { labelSelector: q.get('labelSelector') ?? undefined, fieldSelector: q.get('fieldSelector') ?? undefined });
  const namespace = def.namespaced ? info.namespace : undefined;
  const inScope = (o: KubeObject) => (namespace === undefined || o.metadata.namespace === namespace) && (info.name === undefined || o.metadata.name === info.name) && (!filter || filter(o)) && match(o);
  const rvParam = q.get('resourceVersion') ?? '';
  if (rvParam !== '' && !/^\d+$/.test(rvParam)) throw badRequest(`invalid resource version: ${rvParam}`);
  const table = wantsTable(req);
  const include = (q.get('includeObject') ?? 'Metadata') as IncludeObject;
  const bookmarks = q.get('allowWatchBookmarks') === 'true';
  const timeoutSeconds = Number(q.get('timeoutSeconds') ?? '0');
  let columnsSent = false;

  res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache, private', 'Transfer-Encoding': 'chunked' });
  res.flushHeaders();
  ctx.streams.add(res);
  let handle: WatchHandle | undefined;
  let closed = false;
  const timers: NodeJS.Timeout[] = [];
  const close = () => {
    if (closed) return;
    closed = true;
    handle?.stop();
    for (const t of timers) clearTimeout(t);
    ctx.streams.delete(res);
    if (!res.writableEnded) res.end();
  };
  res.on('close', close);
  req.on('close', close);

  const send = (type: string, obj: KubeObject) => {
    if (closed) return;
    if (table && type !== 'BOOKMARK' && type !== 'ERROR') {
      // kubectl get -w: a Table of one row, the column definitions in a watcher's first one only. Shared by
      // every Table watcher of this form in the same millisecond (the age cells are whole units of time).
      const columns = !columnsSent;
      columnsSent = true;
      const form = `table ${apiVersionOf(def)} ${def.plural} ${include} ${columns ? 'columns' : 'rows'} ${Date.now()}`;
      res.write(plainLine(type, obj, form, () => toTable(def, [withTypeMeta(def, obj)], obj.metadata.resourceVersion ?? '', include, new Date(), { columns })));
    } else {
      // The form (group/version) keys the cache: a converted resource (events.k8s.io) shares events with its stored one.
      res.write(plainLine(type, obj, apiVersionOf(def), () => withTypeMeta(def, def.storedAs && type !== 'BOOKMARK' ? def.storedAs.fromStored(obj) : obj)));
    }
    if (res.writableLength > MAX_BUFFERED_BYTES) {
      ctx.log.warn({ resource: storageKey(def) }, 'watch: client too slow, closing its stream');
      res.destroy();
      close();
    }
  };

  const onEvent = (e: StorageEvent) => {
    const now = inScope(e.object);
    if (e.type === 'ADDED') {
      if (now) send('ADDED', e.object);
    } else if (e.type === 'MODIFIED') {
      const before = e.previous ? inScope(e.previous) : now;
      if (now && before) send('MODIFIED', e.object);
      else if (now) send('ADDED', e.object);
      else if (before) send('DELETED', e.object);
    } else if (inScope(e.previous ?? e.object)) {
      send('DELETED', e.object);
    }
  };

  try {
    const key = storageKey(def);
    if (rvParam === '' || rvParam === '0') {
      const { items, resourceVersion } = await ctx.registry.storage.list(key, namespace);
      for (const o of items) if (inScope(o)) send('ADDED', o);
      handle = ctx.registry.storage.watch(key, resourceVersion, onEvent);
    } else {
      handle = ctx.registry.storage.watch(key, Number(rvParam), onEvent);
    }
  } catch (err: unknown) {
    if (err instanceof StorageError && err.code === 'Expired') {
      const status = new ApiError('Expired', err.message).toStatus();
      res.write(`${JSON.stringify({ type: 'ERROR', object: status })}\n`);
      close();
      return;
    }
    close();
    throw err;
  }
  const beat = () => {
    if (closed) return;
    if (bookmarks) {
      send('BOOKMARK', { kind: def.kind, apiVersion: apiVersionOf(def), metadata: { resourceVersion: String(ctx.registry.storage.currentResourceVersion()) } } as KubeObject);
    } else {
      res.write('\n');
    }
    timers[0] = setTimeout(beat, ctx.watchHeartbeatMs);
    timers[0].unref();
  };
  timers[0] = setTimeout(beat, ctx.watchHeartbeatMs);
  timers[0].unref();
  if (timeoutSeconds > 0) {
    timers[1] = setTimeout(close, timeoutSeconds * 1000);
    timers[1].unref();
  }
}
