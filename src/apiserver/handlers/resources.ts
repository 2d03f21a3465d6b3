/**
 * The resource handler: maps method, name and subresource to a registry verb, decodes bodies and
 * query options, encodes answers (objects, lists, Tables, PartialObjectMetadata) and hands the
 * subresources to their handlers.
 */
import { ApiError, badRequest, successStatus, resourceNotFound } from '../errors.ts';
import type { DeleteOptions, WriteOptions } from '../registry/store.ts';
import type { FieldValidation } from '../registry/meta.ts';
import { apiVersionOf, storageKey } from '../registry/types.ts';
import { escalationAdmission } from '../auth/escalation.ts';
import type { RequestScope } from './context.ts';
import { decodeBody, emptyBodyError, mediaType, patchTypeOf, readBody, sendJson, sendRawJson, wantsPartial, wantsTable, warningHeader } from './http.ts';
import { type IncludeObject, partialMetadata, toTable } from './table.ts';
import { serveWatch } from './watch.ts';
import { serveSubresource } from './subresources.ts';
import { serveConverted } from './converted.ts';
import { cacheOf, serveCachedGet, serveCachedList } from './cached.ts';

/** The write options of a request's query (`dryRun`, `fieldValidation`, `fieldManager`). */
export function writeOptions(url: URL, warnings: string[]): WriteOptions {
  const q = url.searchParams;
  const dry = q.getAll('dryRun');
  for (const d of dry) if (d !== 'All') throw badRequest(`dryRun: Unsupported value: "${d}": supported values: "All"`);
  const fv = q.get('fieldValidation') ?? 'Ignore';
  if (!['Strict', 'Warn', 'Ignore'].includes(fv)) throw badRequest(`fieldValidation: Unsupported value: "${fv}": supported values: "Ignore", "Strict", "Warn"`);
  return { dryRun: dry.length > 0, fieldValidation: fv as FieldValidation, fieldManager: q.get('fieldManager') ?? undefined, warnings };
}

/** The kind kube-apiserver decodes a subresource's create or update body into (else the resource's own kind). */
const SUBRESOURCE_KINDS: Readonly<Record<string, string>> = { binding: 'Binding', eviction: 'Eviction', scale: 'Scale' };

/**
 * Reads and decodes a JSON/YAML/protobuf body (bounded). A create or update (of the resource or a
 * subresource) names the kind it decodes into in a decode error, as kube-apiserver does. An empty body
 * (no bytes, or only white space) of a POST, PUT or PATCH is refused in kube-apiserver's words
 * ({@link emptyBodyError}); a DELETE's may be empty (no DeleteOptions).
 * @throws ApiError what decodeBody throws; BadRequest for an empty write body
 */
export async function readObject(scope: RequestScope): Promise<unknown> {
  const buf = await readBody(scope.req, scope.ctx.maxBodyBytes);
  const method = scope.req.method ?? 'GET';
  const sub = scope.info.subresource;
  const kind = method === 'POST' || method === 'PUT' ? ((sub && SUBRESOURCE_KINDS[sub]) ?? scope.info.def?.kind) : undefined;
  const type = mediaType(scope.req);
  const body = decodeBody(buf, type, { patch: method === 'PATCH', kind });
  if (body === undefined && (method === 'POST' || method === 'PUT' || method === 'PATCH')) {
    throw emptyBodyError(buf, type, method === 'PATCH' ? { patch: patchTypeOf(scope.req), fieldValidation: scope.url.searchParams.get('fieldValidation') } : { kind: kind ?? 'Object' });
  }
  return body;
}

function deleteOptions(url: URL, body: unknown): DeleteOptions {
  const q = url.searchParams;
  const o: DeleteOptions = {};
  if (body && typeof body === 'object' && !Array.isArray(body)) {
    const b = body as Record<string, unknown>;
    if (b.gracePeriodSeconds !== undefined && b.gracePeriodSeconds !== null) o.gracePeriodSeconds = Number(b.gracePeriodSeconds);
    if (typeof b.propagationPolicy === 'string') o.propagationPolicy = b.propagationPolicy as DeleteOptions['propagationPolicy'];
    if (typeof b.orphanDependents === 'boolean') o.orphanDependents = b.orphanDependents;
    if (b.preconditions && typeof b.preconditions === 'object') o.preconditions = b.preconditions as DeleteOptions['preconditions'];
    if (Array.isArray(b.dryRun) && b.dryRun.includes('All')) o.dryRun = true;
  }
  const g = q.get('gracePeriodSeconds');
  if (g !== null) {
    if (!/^-?\d+$/.test(g)) throw badRequest(`invalid gracePeriodSeconds: ${g}`);
    o.gracePeriodSeconds = Number(g);
  }
  const p = q.get('propagationPolicy');
  if (p) o.propagationPolicy = p as DeleteOptions['propagationPolicy'];
  if (q.get('orphanDependents') === 'true') o.orphanDependents = true;
  if (q.getAll('dryRun').includes('All')) o.dryRun = true;
  return o;
}

/**
 * A kubelet may create only its own Node and its own Lease (the authorizer cannot see the name of a
 * create in the URL).
 * @throws ApiError Forbidden
 */
function guardNodeCreate(scope: RequestScope, body: unknown): void {
  const { user, info } = scope;
  if (user.groups.includes('system:masters') || !user.name.startsWith('system:node:')) return;
  if (!(info.group === '' && info.plural === 'nodes') && !(info.group === 'coordination.k8s.io' && info.plural === 'leases')) return;
  const node = user.name.slice('system:node:'.length);
  const name = (body as { metadata?: { name?: unknown } } | undefined)?.metadata?.name;
  if (name !== node) {
    throw new ApiError('Forbidden', `${info.plural} "${String(name)}" is forbidden: User "${user.name}" cannot create resource "${info.plural}" in API group "${info.group}": a node may only create its own ${info.plural === 'nodes' ? 'Node' : 'Lease'}`, {
      name: typeof name === 'string' ? name : undefined,
      group: info.group || undefined,
      kind: info.plural,
    });
  }
}

/** Serves a request on a resource (`info.def` is set). */
export async function serveResource(scope: RequestScope): Promise<void> {
  const { req, res, url, ctx, info } = scope;
  const def = info.def!;
  const reg = ctx.registry;
  const q = url.searchParams;
  const method = req.method ?? 'GET';
  const namespace = def.namespaced ? (info.namespace ?? '') : '';
  if (def.namespaced && info.name !== undefined && !info.namespace) {
    throw resourceNotFound();
  }
  if (def.storedAs) {
    await serveConverted(scope);
    return;
  }
  if (info.subresource !== undefined) {
    await serveSubresource(scope);
    return;
  }
  const warnings: string[] = [];
  const now = new Date();
  const include = (q.get('includeObject') ?? 'Metadata') as IncludeObject;
  if (!['None', 'Metadata', 'Object'].includes(include)) throw badRequest(`includeObject: Unsupported value: "${include}"`);

  if (method === 'GET' && q.get('watch') === 'true') {
    await serveWatch(scope);
    return;
  }
  if (info.name === undefined) {
    switch (method) {
      case 'GET': {
        const cache = await cacheOf(ctx, def);
        if (cache && (await serveCachedList(scope, cache, include))) return;
        const limit = q.get('limit');
        if (limit !== null && !/^\d+$/.test(limit)) throw badRequest(`invalid limit: ${limit}`);
        const listOpts = {
          labelSelector: q.get('labelSelector') ?? undefined,
          fieldSelector: q.get('fieldSelector') ?? undefined,
          limit: limit ? Number(limit) : undefined,
          continue: q.get('continue') ?? undefined,
        };
        if (!wantsTable(req) && !wantsPartial(req)) {
          sendRawJson(res, 200, await reg.listJson(def, def.namespaced ? info.namespace : undefined, listOpts));
          return;
        }
        const list = await reg.list(def, def.namespaced ? info.namespace : undefined, listOpts);
        if (wantsTable(req)) {
          sendJson(res, 200, toTable(def, list.items, list.resourceVersion, include, now, { continue: list.continue, remainingItemCount: list.remainingItemCount }));
          return;
        }
        const metadata: Record<string, unknown> = { resourceVersion: list.resourceVersion };
        if (list.continue) metadata.continue = list.continue;
        if (list.remainingItemCount !== undefined) metadata.remainingItemCount = list.remainingItemCount;
        sendJson(res, 200, { kind: 'PartialObjectMetadataList', apiVersion: 'meta.k8s.io/v1', metadata, items: list.items.map(partialMetadata) });
        return;
      }
      case 'POST': {
        const body = await readObject(scope);
        guardNodeCreate(scope, body);
        const created = await reg.create(def, namespace, body, { ...writeOptions(url, warnings), admit: escalationAdmission(reg, scope.user, def) });
        ctx.log.debug({ resource: storageKey(def), namespace, name: created.metadata.name }, 'created');
        sendJson(res, 201, created, warningHeader(warnings));
        return;
      }
      case 'DELETE': {
        const body = await readObject(scope).catch(() => undefined);
        const items = await reg.deleteCollection(def, def.namespaced ? info.namespace : undefined, { labelSelector: q.get('labelSelector') ?? undefined, fieldSelector: q.get('fieldSelector') ?? undefined }, deleteOptions(url, body));
        sendJson(res, 200, { kind: def.listKind, apiVersion: apiVersionOf(def), metadata: { resourceVersion: String(reg.storage.currentResourceVersion()) }, items });
        return;
      }
      default:
        throw new ApiError('MethodNotAllowed', `${method} is not supported on ${def.plural}`);
    }
  }
  const name = info.name;
  switch (method) {
    case 'GET': {
      const cache = await cacheOf(ctx, def);
      if (cache && (await serveCachedGet(scope, cache, namespace, name, include))) return;
      if (!wantsTable(req) && !wantsPartial(req)) {
        sendRawJson(res, 200, await reg.getJson(def, namespace, name));
        return;
      }
      const obj = await reg.get(def, namespace, name);
      if (wantsTable(req)) sendJson(res, 200, toTable(def, [obj], obj.metadata.resourceVersion ?? '', include, now));
      else if (wantsPartial(req)) sendJson(res, 200, partialMetadata(obj));
      else sendJson(res, 200, obj);
      return;
    }
    case 'PUT': {
      const body = await readObject(scope);
      const obj = await reg.update(def, namespace, name, body, { ...writeOptions(url, warnings), admit: escalationAdmission(reg, scope.user, def) });
      sendJson(res, 200, obj, warningHeader(warnings));
      return;
    }
    case 'PATCH': {
      const type = patchTypeOf(req);
      const body = await readObject(scope);
      const opts = { ...writeOptions(url, warnings), admit: escalationAdmission(reg, scope.user, def) };
      if (type === 'apply') {
        if (!opts.fieldManager) throw badRequest('PATCH of type apply requires a fieldManager (the fieldManager query parameter)');
        if (q.has('fieldValidation') === false) opts.fieldValidation = 'Strict';
      }
      const r = await reg.patch(def, namespace, name, type, body, opts);
      sendJson(res, r.created ? 201 : 200, r.object, warningHeader(warnings));
      return;
    }
    case 'DELETE': {
      const body = await readObject(scope).catch((err: unknown) => {
        if (err instanceof ApiError && err.reason === 'UnsupportedMediaType') return undefined; // drain's protobuf DeleteOptions
        throw err;
      });
      const r = await reg.delete(def, namespace, name, deleteOptions(url, body));
      if (r.deleted && !(def.group === '' && def.plural === 'pods')) {
        sendJson(res, 200, successStatus(200, { name, kind: def.plural, uid: r.object.metadata.uid }));
        return;
      }
      sendJson(res, r.deleted || def.plural === 'pods' ? 200 : 202, r.object);
      return;
    }
    default:
      throw new ApiError('MethodNotAllowed', `${method} is not supported on ${def.plural}/${name}`);
  }
}
