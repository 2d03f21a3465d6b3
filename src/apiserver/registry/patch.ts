/**
 * The patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and Kubernetes'
 * strategic merge patch for the built-in types (lists of objects merged by their merge key,
 * `$patch`, `$retainKeys`, `$setElementOrder`, `$deleteFromPrimitiveList` directives).
 */
import { badRequest } from '../errors.ts';

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Obj = { [k: string]: Json };

const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);

/** RFC 7386 JSON merge patch: objects merge recursively, `null` deletes, anything else replaces. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (!isObj(patch)) return structuredClone(patch);
  const out: Obj = isObj(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v) as Json;
  }
  return out;
}

function unescapePointer(p: string): string[] {
  if (p === '') return [];
  if (!p.startsWith('/')) throw badRequest(`the JSON pointer "${p}" must start with "/"`);
  return p
    .slice(1)
    .split('/')
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/**
 * RFC 6902 JSON patch: add, remove, replace, move, copy, test.
 * @throws ApiError BadRequest (malformed op) or Invalid-like BadRequest when a path is missing or a test fails
 */
export function jsonPatch(target: unknown, ops: unknown): unknown {
  if (!Array.isArray(ops)) throw badRequest('a JSON patch must be an array of operations');
  let doc = structuredClone(target) as Json;
  const parentOf = (path: string[]): { parent: Json; key: string } => {
    let cur: Json = doc;
    for (const seg of path.slice(0, -1)) {
      if (Array.isArray(cur)) cur = cur[Number(seg)] as Json;
      else if (isObj(cur)) cur = cur[seg] as Json;
      else cur = undefined as unknown as Json;
      if (cur === undefined) throw badRequest(`doc is missing path: "/${path.join('/')}": missing value`);
    }
    return { parent: cur, key: path[path.length - 1]! };
  };
  const get = (path: string[]): Json => {
    let cur: Json = doc;
    for (const seg of path) {
      if (Array.isArray(cur)) cur = cur[Number(seg)] as Json;
      else if (isObj(cur)) cur = cur[seg] as Json;
      else cur = undefined as unknown as Json;
      if (cur === undefined) throw badRequest(`doc is missing path: "/${path.join('/')}": missing value`);
    }
    return cur;
  };
  const remove = (path: string[]): Json => {
    const { parent, key } = parentOf(path);
    if (Array.isArray(parent)) {
      const i = Number(key);
      if (!(i >= 0 && i < parent.length)) throw badRequest(`doc is missing path: "/${path.join('/')}"`);
      return parent.splice(i, 1)[0]!;
    }
    if (isObj(parent) && key in parent) {
      const v = parent[key]!;
      delete parent[key];
      return v;
    }
    throw badRequest(`doc is missing path: "/${path.join('/')}": missing value`);
  };
  const add = (path: string[], value: Json) => {
    if (path.length === 0) {
      doc = value;
      return;
    }
    const { parent, key } = parentOf(path);
    if (Array.isArray(parent)) {
      const i = key === '-' ? parent.length : Number(key);
      if (!(i >= 0 && i <= parent.length)) throw badRequest(`add operation index out of bounds: ${key}`);
      parent.splice(i, 0, value);
    } else if (isObj(parent)) parent[key] = value;
    else throw badRequest(`doc is missing path: "/${path.join('/')}"`);
  };
  for (const raw of ops) {
    if (!isObj(raw) || typeof raw.op !== 'string' || typeof raw.path !== 'string') throw badRequest('each JSON patch operation needs "op" and "path"');
    const path = unescapePointer(raw.path);
    switch (raw.op) {
      case 'add':
        add(path, structuredClone(raw.value) as Json);
        break;
      case 'remove':
        remove(path);
        break;
      case 'replace':
        get(path);
        if (path.length === 0) doc = structuredClone(raw.value) as Json;
        else {
          remove(path);
          add(path, structuredClone(raw.value) as Json);
        }
        break;
      case 'move': {
        const v = remove(unescapePointer(String(raw.from)));
        add(path, v);
        break;
      }
      case 'copy':
        add(path, structuredClone(get(unescapePointer(String(raw.from)))));
        break;
      case 'test':
        if (JSON.stringify(get(path)) !== JSON.stringify(raw.value)) throw badRequest(`testing value /${path.join('/')} failed`);
        break;
      default:
        throw badRequest(`unexpected JSON patch operation "${raw.op}"`);
    }
  }
  return doc;
}

/**
 * The merge key of a list in the built-in types, by the list's field name and its parent path; undefined:
 * the list is atomic (replaced as a whole) unless it is a primitive list with merge strategy.
 */
export function mergeKeyOf(field: string, path: string[]): string | undefined {
  switch (field) {
    case 'containers':
    case 'initContainers':
    case 'ephemeralContainers':
    case 'volumes':
    case 'env':
    case 'imagePullSecrets':
    case 'containerStatuses':
    case 'initContainerStatuses':
      return 'name';
    case 'ports':
      // Service ports merge by port; container ports by containerPort; an EndpointSlice's (top level) are atomic.
      if (path.length === 1) return undefined;
      return path.includes('containers') || path.includes('initContainers') ? 'containerPort' : 'port';
    case 'volumeMounts':
      return 'mountPath';
    case 'volumeDevices':
      return 'devicePath';
    case 'conditions':
    case 'addresses':
      return 'type';
    case 'ownerReferences':
      return 'uid';
    case 'hostAliases':
      return 'ip';
    case 'topologySpreadConstraints':
      return 'topologyKey';
    case 'taints':
      return 'key';
    default:
      return undefined;
  }
}

/** Primitive lists with patch strategy merge (union, order kept). */
export const MERGED_PRIMITIVE_LISTS = new Set(['finalizers']);

/**
 * Strategic merge patch of `patch` onto `target` (both JSON objects).
 * @throws ApiError BadRequest on a malformed directive
 */
export function strategicMergePatch(target: unknown, patch: unknown): unknown {
  return smpObject(isObj(target) ? target : {}, isObj(patch) ? patch : {}, []);
}

function smpObject(target: Obj, patch: Obj, path: string[]): Json {
  if (patch.$patch === 'replace') {
    const copy = { ...patch };
    delete copy.$patch;
    return structuredClone(copy);
  }
  if (patch.$patch === 'delete') return null;
  let out: Obj = { ...target };
  if (Array.isArray(patch.$retainKeys)) {
    const keep = new Set(patch.$retainKeys as string[]);
    out = Object.fromEntries(Object.entries(out).filter(([k]) => keep.has(k)));
  }
  for (const [k, v] of Object.entries(patch)) {
    if (k === '$patch' || k === '$retainKeys') continue;
    if (k.startsWith('$setElementOrder/')) continue;
    if (k.startsWith('$deleteFromPrimitiveList/')) {
      const field = k.slice('$deleteFromPrimitiveList/'.length);
      const del = new Set((Array.isArray(v) ? v : []).map((x) => JSON.stringify(x)));
      if (Array.isArray(out[field])) out[field] = (out[field] as Json[]).filter((x) => !del.has(JSON.stringify(x)));
      continue;
    }
    if (v === null) {
      delete out[k];
      continue;
    }
    const cur = out[k];
    if (isObj(v)) {
      const merged = smpObject(isObj(cur) ? cur : {}, v, [...path, k]);
      if (merged === null) delete out[k];
      else out[k] = merged;
    } else if (Array.isArray(v)) {
      out[k] = smpList(k, Array.isArray(cur) ? cur : [], v, [...path, k], patch[`$setElementOrder/${k}`]);
    } else {
      out[k] = v;
    }
  }
  return out;
}

function smpList(field: string, target: Json[], patch: Json[], path: string[], order: Json | undefined): Json[] {
  const key = mergeKeyOf(field, path);
  if (patch.length === 1 && isObj(patch[0]) && patch[0].$patch === 'replace') return [];
  if (key === undefined) {
    if (MERGED_PRIMITIVE_LISTS.has(field)) {
      const out = [...target];
      for (const v of patch) if (!out.some((x) => JSON.stringify(x) === JSON.stringify(v))) out.push(v);
      return out;
    }
    return structuredClone(patch);
  }
  const out: Json[] = target.map((x) => x);
  const patchHasReplace = patch.some((p) => isObj(p) && p.$patch === 'replace');
  if (patchHasReplace) return patch.filter((p) => !(isObj(p) && p.$patch === 'replace'));
  for (const item of patch) {
    if (!isObj(item)) {
      out.push(item);
      continue;
    }
    const kv = item[key];
    const idx = out.findIndex((x) => isObj(x) && JSON.stringify(x[key]) === JSON.stringify(kv));
    if (item.$patch === 'delete') {
      if (idx >= 0) out.splice(idx, 1);
      continue;
    }
    if (idx >= 0) out[idx] = smpObject(out[idx] as Obj, item, path);
    else {
      const fresh = smpObject({}, item, path);
      if (fresh !== null) out.push(fresh);
    }
  }
  if (Array.isArray(order)) {
    const rank = new Map<string, number>();
    order.forEach((o, i) => {
      if (isObj(o)) rank.set(JSON.stringify(o[key]), i);
    });
    const ranked = out.map((x, i) => ({ x, i, r: isObj(x) ? (rank.get(JSON.stringify(x[key])) ?? Number.MAX_SAFE_INTEGER) : Number.MAX_SAFE_INTEGER }));
    ranked.sort((a, b) => a.r - b.r || a.i - b.i);
    return ranked.map((e) => e.x);
  }
  return out;
}
