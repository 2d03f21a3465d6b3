/**
 * Watch (`?watch=true`): a chunked stream of `{"type","object"}` lines, one per event, flushed at
 * once (kubectl-wire §2.3). Served by the watch cache (storage/cacher.ts): each dispatched event's
 * line is made once per form and written to every watcher of it; a watcher that leaves more than
 * `watchBufferBytes` unsent is ended (its client watches again). A watch from before the cache's
 * window is served by the store's own watch. From `resourceVersion` 0 or empty the current objects come first as
 * ADDED; from a number, every later event; past the watch window an ERROR event with a 410 Expired
 * Status ends the stream. Label and field selectors turn changes into ADDED/DELETED as objects
 * enter or leave the selection. Bookmarks (`allowWatchBookmarks`) or bare newlines keep quiet
 * streams alive. A streaming list (`sendInitialEvents=true&resourceVersionMatch=NotOlderThan`, kube
 * 1.32's WatchList, on by default there) sends the current state (consistent when `resourceVersion`
 * is unset, at least N for N) as ADDED, then a BOOKMARK annotated `k8s.io/initial-events-end: "true"`
 * (with `allowWatchBookmarks`), then the changes; `sendInitialEvents=false` starts without them.
 */
import { ApiError, badRequest } from '../errors.ts';
import type { KubeObject, StorageEvent, WatchHandle } from '../storage/index.ts';
import { StorageError } from '../storage/index.ts';
import { withTypeMeta } from '../registry/meta.ts';
import { apiVersionOf, storageKey } from '../registry/types.ts';
import type { RequestScope } from './context.ts';
import { wantsTable } from './http.ts';
import { type IncludeObject, toTable } from './table.ts';
import type { CachedObject, CacheEvent, CacheWatcher } from '../storage/cacher.ts';
import { cacheOf, indexValueOf, tooLarge, WAIT_MS } from './cached.ts';

/** The annotation of the BOOKMARK that ends a streaming list's initial events (client-go's reflector waits for it). */
export const INITIAL_EVENTS_END_ANNOTATION = 'k8s.io/initial-events-end';

/**
 * kube-apiserver's validateWatchOptions (WatchList on, as in 1.32) of a watch's `sendInitialEvents`
 * (normalized `true`/`false`, or null when absent), `resourceVersionMatch` and `continue`.
 * @throws ApiError Invalid (422) naming each field error, as kube aggregates them
 */
function validateWatchOptions(sendInitial: string | null, match: string, cont: string): void {
  const causes: { reason: string; message: string; field: string }[] = [];
  const forbidden = (message: string) => causes.push({ reason: 'FieldValueForbidden', message: `Forbidden: ${message}`, field: 'resourceVersionMatch' });
  if (sendInitial !== null && match !== 'NotOlderThan') forbidden('sendInitialEvents requires setting resourceVersionMatch to NotOlderThan');
  if (match !== '') {
    if (sendInitial === null) forbidden('resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided');
    if (match !== 'NotOlderThan') causes.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: "${match}": supported values: "NotOlderThan"`, field: 'resourceVersionMatch' });
    if (cont !== '') forbidden('resourceVersionMatch is forbidden when continue is provided');
  }
  if (causes.length === 0) return;
  const each = causes.map((c) => `${c.field}: ${c.message}`);
  throw new ApiError('Invalid', `ListOptions.meta.k8s.io "" is invalid: ${each.length === 1 ? each[0] : `[${each.join(', ')}]`}`, { group: 'meta.k8s.io', kind: 'ListOptions', causes });
}

/**
 * The JSON line of an event for a form (the plain object of a group/version, or a Table of given
 * options), made once per dispatched event and form and shared by every watcher of that form: a
 * write fanned out to 100 watchers is encoded once. Lines of a watch's initial state, sent to one
 * watcher, are not kept.
 */
function line(ev: CacheEvent | undefined, type: string, form: string, make: () => string): Buffer {
  if (!ev) return Buffer.from(make());
  ev.encoded ??= new Map();
  const key = `${type} ${form}`;
  let b = ev.encoded.get(key);
  if (b === undefined) {
    b = Buffer.from(make());
    ev.encoded.set(key, b);
  }
  return b;
}

/** Bytes a watcher may have unsent before its stream is ended as too slow (kube's cacheWatcher buffer). */
export const DEFAULT_WATCH_BUFFER_BYTES = 8 * 1024 * 1024;
/** How long an ended slow watcher's unsent bytes may take to leave before its connection is cut, ms. */
const SLOW_WATCHER_GRACE_MS = 10_000;

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
  const sendInitial = q.get('sendInitialEvents');
  validateWatchOptions(sendInitial, q.get('resourceVersionMatch') ?? '', q.get('continue') ?? '');
  // What the stream starts with: the current state as ADDED, nothing (from now), or the events after N.
  const start: 'state' | 'now' | 'since' = sendInitial === 'true' ? 'state' : rvParam === '' || rvParam === '0' ? (sendInitial === 'false' ? 'now' : 'state') : 'since';
  const endBookmark = sendInitial === 'true' && bookmarks;
  let columnsSent = false;

  // The cache serves the watch unless it starts before the cache's window (the store's own window then answers, or 410).
  const cache = await cacheOf(ctx, def);
  let fromCache = false;
  if (cache !== undefined) {
    if (start === 'since') fromCache = Number(rvParam) >= cache.oldestRv;
    else if (rvParam === '') fromCache = await ctx.cacher!.sync();
    else if (rvParam === '0') fromCache = true;
    else {
      // A streaming list from N: the state once the cache has seen N (NotOlderThan), as kube's cacher waits.
      if (!(await ctx.cacher!.waitFor(Number(rvParam), WAIT_MS))) throw tooLarge(Number(rvParam), cache.rv);
      fromCache = true;
    }
  }
  const limit = ctx.watchBufferBytes ?? DEFAULT_WATCH_BUFFER_BYTES;

  res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache, private', 'Transfer-Encoding': 'chunked' });
  res.flushHeaders();
  ctx.streams.add(res);
  ctx.streamEnders.set(res, () => close());
  let handle: WatchHandle | undefined;
  let closed = false;
  const timers: NodeJS.Timeout[] = [];
  const close = () => {
    if (closed) return;
    closed = true;
    handle?.stop();
    for (const t of timers) clearTimeout(t);
    ctx.streams.delete(res);
    ctx.streamEnders.delete(res);
    if (!res.writableEnded) res.end();
  };
  res.on('close', close);
  req.on('close', close);

  /** The bytes of one event for this watcher; `ev` keys the encoding shared with other watchers. */
  const encode = (type: string, obj: KubeObject, ev?: CacheEvent, cached?: CachedObject): Buffer => {
    if (table && type !== 'BOOKMARK' && type !== 'ERROR') {
      // kubectl get -w: a Table of one row, the column definitions in a watcher's first one only. Shared by
      // every Table watcher of this form in the same millisecond (the age cells are whole units of time).
      const columns = !columnsSent;
      columnsSent = true;
      const form = `table ${apiVersionOf(def)} ${def.plural} ${include} ${columns ? 'columns' : 'rows'} ${Date.now()}`;
      return line(ev, type, form, () => `${JSON.stringify({ type, object: toTable(def, [withTypeMeta(def, obj)], obj.metadata.resourceVersion ?? '', include, new Date(), { columns }) })}\n`);
    }
    if (cached && !def.storedAs) return line(ev, type, apiVersionOf(def), () => `{"type":"${type}","object":${cached.json}}\n`);
    // The form (group/version) keys the encoding: a converted resource (events.k8s.io) has its own.
    return line(ev, type, apiVersionOf(def), () => `${JSON.stringify({ type, object: withTypeMeta(def, def.storedAs && type !== 'BOOKMARK' ? def.storedAs.fromStored(obj) : obj) })}\n`);
  };

  /** Ends a watcher that leaves more than `limit` bytes unsent: its client watches again from what it saw. */
  const checkSlow = () => {
    if (closed || res.writableLength <= limit) return;
    ctx.log.warn({ resource: storageKey(def), unsent: res.writableLength }, 'watch: client too slow, ending its watch');
    ctx.cacher?.noteTerminated(storageKey(def));
    close();
    setTimeout(() => res.destroy(), SLOW_WATCHER_GRACE_MS).unref();
  };

  const send = (type: string, obj: KubeObject, ev?: CacheEvent, cached?: CachedObject) => {
    if (closed) return;
    res.write(encode(type, obj, ev, cached));
    checkSlow();
  };

  /** The type this watcher sees for a change: selectors turn changes into ADDED/DELETED as objects enter or leave. */
  const typeFor = (type: StorageEvent['type'], now: KubeObject, previous: KubeObject | undefined): string | undefined => {
    const isIn = inScope(now);
    if (type === 'ADDED') return isIn ? 'ADDED' : undefined;
    if (type === 'MODIFIED') {
      const before = previous ? inScope(previous) : isIn;
      return isIn && before ? 'MODIFIED' : isIn ? 'ADDED' : before ? 'DELETED' : undefined;
    }
    return inScope(previous ?? now) ? 'DELETED' : undefined;
  };

  const onEvent = (e: StorageEvent) => {
    const type = typeFor(e.type, e.object, e.previous);
    if (type) send(type, e.object);
  };

  /** A batch from the cache: one write (corked) of its lines; `shared` when other watchers get the same batch (a dispatch, not a replay). */
  const deliver = (events: readonly CacheEvent[], shared = true) => {
    if (closed) return;
    res.cork();
    for (const ev of events) {
      const type = typeFor(ev.type, ev.object.object, ev.previous?.object);
      if (type) res.write(encode(type, ev.object.object, shared ? ev : undefined, ev.object));
    }
    res.uncork();
    checkSlow();
  };

  /** The BOOKMARK that ends a streaming list's initial events, at the version of the state they were. */
  const initialEventsEnd = (rv: number): KubeObject => ({ kind: def.kind, apiVersion: apiVersionOf(def), metadata: { resourceVersion: String(rv), annotations: { [INITIAL_EVENTS_END_ANNOTATION]: 'true' } } }) as KubeObject;

  /** The store (or the cache) ended this watch: events are missing, so the client must list again (410, as kube). */
  const expired = (err: StorageError) => {
    if (closed) return;
    res.write(`${JSON.stringify({ type: 'ERROR', object: new ApiError('Expired', err.message).toStatus() })}\n`);
    close();
  };

  try {
    const key = storageKey(def);
    if (cache && fromCache) {
      // A spec.nodeName selector: offered only the events of its node's pods (indexed triggers), its state read from the index.
      const indexValue = indexValueOf(cache, q.get('fieldSelector') ?? undefined);
      const watcher: CacheWatcher = { fromRv: 0, indexValue, deliver: (events) => deliver(events), end: expired };
      if (start === 'state' || start === 'now') {
        // The current state as ADDED (unless from now), then every later event: both at once, nothing between.
        res.cork();
        const page = cache.list({ namespace, index: start === 'state' ? indexValue : undefined });
        if (start === 'state') for (const o of page.items) if (inScope(o.object)) res.write(encode('ADDED', o.object, undefined, o));
        if (endBookmark) res.write(encode('BOOKMARK', initialEventsEnd(page.rv)));
        handle = cache.watchFromNow(watcher);
        res.uncork();
        checkSlow();
      } else {
        handle = cache.watch(Number(rvParam), watcher, (replayed) => deliver(replayed, false));
      }
    } else if (start === 'state' || start === 'now') {
      const { items, resourceVersion } = await ctx.registry.storage.list(key, namespace);
      if (start === 'state') for (const o of items) if (inScope(o)) send('ADDED', o);
      if (endBookmark) send('BOOKMARK', initialEventsEnd(resourceVersion));
      handle = ctx.registry.storage.watch(key, resourceVersion, onEvent, expired);
    } else {
      handle = ctx.registry.storage.watch(key, Number(rvParam), onEvent, expired);
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
      // Events the cache has not dispatched yet go first: a bookmark claims nothing unsent.
      cache?.dispatch();
      const rv = fromCache ? cache!.rv : ctx.registry.storage.currentResourceVersion();
      send('BOOKMARK', { kind: def.kind, apiVersion: apiVersionOf(def), metadata: { resourceVersion: String(rv) } } as KubeObject);
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
