/**
 * Server-side apply (`application/apply-patch+yaml`) as far as `kubectl apply --server-side`
 * needs: each field manager's applied fields are kept in `metadata.managedFields` (operation
 * `Apply`, `fieldsV1` in Kubernetes' format: `f:<field>`, `k:{<merge key>}` for keyed list items,
 * `v:<value>` for set items, `.` for an item itself); a field the same manager applied before and
 * now leaves out is removed, unless another manager applied it too; the applied configuration is
 * then merged like a strategic merge patch. There are no conflicts: applying a field another
 * manager owns takes it over (as `force=true` would).
 */
import { MERGED_PRIMITIVE_LISTS, mergeKeyOf, strategicMergePatch } from './patch.ts';
import type { KubeObject } from '../storage/index.ts';
import { timestamp } from './meta.ts';

type Tree = { [segment: string]: Tree };

const isObj = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** The fields set by an applied configuration, as a fieldsV1 tree. `path` holds field names (for merge keys). */
export function fieldsOf(value: Record<string, unknown>, path: string[] = []): Tree {
  const out: Tree = {};
  for (const [k, v] of Object.entries(value)) {
    if (path.length === 0 && (k === 'apiVersion' || k === 'kind')) continue;
    if (path.length === 1 && path[0] === 'metadata' && !['labels', 'annotations', 'ownerReferences', 'finalizers'].includes(k)) continue;
    const seg = `f:${k}`;
    if (isObj(v)) out[seg] = fieldsOf(v, [...path, k]);
    else if (Array.isArray(v)) {
      const key = mergeKeyOf(k, [...path, k]);
      if (key !== undefined && v.every(isObj)) {
        const items: Tree = {};
        for (const item of v as Record<string, unknown>[]) items[`k:${JSON.stringify({ [key]: item[key] })}`] = { '.': {}, ...fieldsOf(item, [...path, k]) };
        out[seg] = items;
      } else if (MERGED_PRIMITIVE_LISTS.has(k)) {
        const items: Tree = {};
        for (const item of v) items[`v:${JSON.stringify(item)}`] = {};
        out[seg] = items;
      } else out[seg] = {};
    } else out[seg] = {};
  }
  return out;
}

/** Every path of a tree, each a list of segments, leaves and inner nodes alike. */
function paths(tree: Tree, prefix: string[] = [], out: string[][] = []): string[][] {
  for (const [seg, sub] of Object.entries(tree)) {
    const p = [...prefix, seg];
    out.push(p);
    paths(sub, p, out);
  }
  return out;
}

/** Removes the field or list item at `path` (fieldsV1 segments) from `obj`, in place. */
function removePath(obj: unknown, path: string[]): void {
  let cur: unknown = obj;
  for (let i = 0; i < path.length; i++) {
    const seg = path[i]!;
    const last = i === path.length - 1 || (i === path.length - 2 && path[i + 1] === '.');
    if (seg.startsWith('f:')) {
      if (!isObj(cur)) return;
      const name = seg.slice(2);
      if (last) {
        delete cur[name];
        return;
      }
      cur = cur[name];
    } else if (seg.startsWith('k:') || seg.startsWith('v:')) {
      if (!Array.isArray(cur)) return;
      const want = JSON.parse(seg.slice(2)) as unknown;
      const idx = cur.findIndex((item) => (seg.startsWith('v:') ? JSON.stringify(item) === JSON.stringify(want) : isObj(item) && isObj(want) && Object.entries(want).every(([k, v]) => JSON.stringify(item[k]) === JSON.stringify(v))));
      if (idx < 0) return;
      if (last) {
        cur.splice(idx, 1);
        return;
      }
      cur = cur[idx];
    } else return;
  }
}

/** A managedFields entry as Kubernetes writes it. */
interface ManagedFieldsEntry {
  manager: string;
  operation: 'Apply' | 'Update';
  apiVersion: string;
  time: string;
  fieldsType: 'FieldsV1';
  fieldsV1: Tree;
  subresource?: string;
}

/**
 * Applies `applied` (the configuration of `manager`) to `current`: removes what the manager applied
 * before and no longer applies (unless another Apply manager owns it), merges, and records the
 * manager's fields.
 * @returns the new object (not yet validated)
 */
export function serverSideApply(current: KubeObject, applied: Record<string, unknown>, manager: string, apiVersion: string, now: Date): KubeObject {
  const entries = ((current.metadata.managedFields as ManagedFieldsEntry[] | undefined) ?? []).filter((e) => e && typeof e === 'object');
  const mine = entries.find((e) => e.manager === manager && e.operation === 'Apply');
  const newFields = fieldsOf(applied);
  const base = structuredClone(current) as Record<string, unknown>;
  if (mine) {
    const keep = new Set(paths(newFields).map((p) => JSON.stringify(p)));
    for (const e of entries) if (e !== mine && e.operation === 'Apply') for (const p of paths(e.fieldsV1 ?? {})) keep.add(JSON.stringify(p));
    const gone = paths(mine.fieldsV1 ?? {}).filter((p) => !keep.has(JSON.stringify(p)) && p[p.length - 1] !== '.');
    // Removing a field or list item removes what is under it: drop paths below another removed one
    // (removing a keyed item's fields first would lose the key that finds it).
    const goneKeys = new Set(gone.map((p) => JSON.stringify(p)));
    const top = gone.filter((p) => !p.some((_, i) => i > 0 && i < p.length && goneKeys.has(JSON.stringify(p.slice(0, i)))));
    for (const p of top) removePath(base, p);
  }
  const merged = strategicMergePatch(base, applied) as KubeObject;
  const entry: ManagedFieldsEntry = { manager, operation: 'Apply', apiVersion, time: timestamp(now), fieldsType: 'FieldsV1', fieldsV1: newFields };
  merged.metadata.managedFields = [...entries.filter((e) => e !== mine), entry];
  return merged;
}

/** The managedFields of a new object created by an apply. */
export function managedFieldsForCreate(applied: Record<string, unknown>, manager: string, apiVersion: string, now: Date): ManagedFieldsEntry[] {
  return [{ manager, operation: 'Apply', apiVersion, time: timestamp(now), fieldsType: 'FieldsV1', fieldsV1: fieldsOf(applied) }];
}
