/**
 * Resources stored as another resource (`ResourceDef.storedAs`: events.k8s.io/v1 Events as core
 * Events): every verb runs on the stored resource, with bodies converted on the way in and objects
 * on the way out. Selectors name the stored fields.
 */
import { ApiError, badRequest, successStatus, resourceNotFound } from '../errors.ts';
import { checkBodyShape, withTypeMeta } from '../registry/meta.ts';
import { jsonPatch, mergePatch, strategicMergePatch } from '../registry/patch.ts';
import { apiVersionOf } from '../registry/types.ts';
import type { KubeObject } from '../storage/index.ts';
import type { RequestScope } from './context.ts';
import { cacheOf, serveCachedList } from './cached.ts';
import { mediaType, sendJson, wantsTable, warningHeader } from './http.ts';
import { readObject, writeOptions } from './resources.ts';
import { type IncludeObject, toTable } from './table.ts';
import { serveWatch } from './watch.ts';

/** Serves a request on a converted resource (`info.def.storedAs` is set). */
export async function serveConverted(scope: RequestScope): Promise<void> {
  const { req, res, url, ctx, info } = scope;
  const def = info.def!;
  const conv = def.storedAs!;
  const stored = conv.def;
  const reg = ctx.registry;
  const q = url.searchParams;
  const method = req.method ?? 'GET';
  const namespace = info.namespace ?? '';
  const out = (o: KubeObject) => withTypeMeta(def, conv.fromStored(o));
  const warnings: string[] = [];
  if (info.subresource !== undefined) throw resourceNotFound();
  const include = (q.get('includeObject') ?? 'Metadata') as IncludeObject;
  if (method === 'GET' && q.get('watch') === 'true') {
    await serveWatch(scope);
    return;
  }
  const toStoredBody = (body: unknown): KubeObject => {
    warnings.push(...checkBodyShape(def, body, writeOptions(url, []).fieldValidation ?? 'Ignore'));
    const b = body as KubeObject;
    return conv.toStored({ ...b, metadata: b.metadata ?? {} });
  };
  if (info.name === undefined) {
    if (method === 'GET') {
      // Lists (JSON, Table, metadata) from the stored resource's watch cache, with its resourceVersion semantics (handlers/cached.ts).
      const cache = await cacheOf(ctx, def);
      if (cache && (await serveCachedList(scope, cache, include))) return;
      const limit = q.get('limit');
      const list = await reg.list(stored, info.namespace, {
        labelSelector: q.get('labelSelector') ?? undefined,
        fieldSelector: q.get('fieldSelector') ?? undefined,
        limit: limit && /^\d+$/.test(limit) ? Number(limit) : undefined,
        continue: q.get('continue') ?? undefined,
      });
      if (wantsTable(req)) return sendJson(res, 200, toTable(def, list.items, list.resourceVersion, include, new Date(), { continue: list.continue }));
      const metadata: Record<string, unknown> = { resourceVersion: list.resourceVersion };
      if (list.continue) metadata.continue = list.continue;
      return sendJson(res, 200, { kind: def.listKind, apiVersion: apiVersionOf(def), metadata, items: list.items.map(out) });
    }
    if (method === 'POST') {
      const created = await reg.create(stored, namespace, toStoredBody(await readObject(scope)), writeOptions(url, warnings));
      return sendJson(res, 201, out(created), warningHeader(warnings));
    }
    throw new ApiError('MethodNotAllowed', `${method} is not supported on ${def.plural}.${def.group}`);
  }
  const name = info.name;
  switch (method) {
    case 'GET': {
      const o = await reg.get(stored, namespace, name);
      // kubectl get events.events.k8s.io NAME asks for a Table, as for a list.
      if (wantsTable(req)) return sendJson(res, 200, toTable(def, [o], o.metadata.resourceVersion ?? '', include, new Date()));
      return sendJson(res, 200, out(o));
    }
    case 'PUT':
      return sendJson(res, 200, out(await reg.update(stored, namespace, name, toStoredBody(await readObject(scope)), writeOptions(url, warnings))), warningHeader(warnings));
    case 'PATCH': {
      const type = mediaType(req);
      const body = await readObject(scope);
      const current = out(await reg.get(stored, namespace, name));
      let patched: unknown;
      if (type === 'application/merge-patch+json') patched = mergePatch(current, body);
      else if (type === 'application/json-patch+json') patched = jsonPatch(current, body);
      else if (type === 'application/strategic-merge-patch+json') patched = strategicMergePatch(current, body);
      else throw new ApiError('UnsupportedMediaType', 'accepted patch media types: application/merge-patch+json, application/json-patch+json, application/strategic-merge-patch+json');
      if (patched === null || typeof patched !== 'object' || Array.isArray(patched)) throw badRequest('the patch must leave an object');
      const next = toStoredBody(patched);
      next.metadata = { ...next.metadata, resourceVersion: current.metadata.resourceVersion };
      return sendJson(res, 200, out(await reg.update(stored, namespace, name, next, writeOptions(url, warnings))), warningHeader(warnings));
    }
    case 'DELETE': {
      const r = await reg.delete(stored, namespace, name, {});
      return sendJson(res, 200, r.deleted ? successStatus(200, { name, group: def.group, kind: def.plural, uid: r.object.metadata.uid }) : out(r.object));
    }
    default:
      throw new ApiError('MethodNotAllowed', `${method} is not supported on ${def.plural}.${def.group}`);
  }
}
