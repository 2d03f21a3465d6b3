/**
 * Server-side printing: `meta.k8s.io/v1` Table answers for get, list and watch, with
 * `rows[].object` as PartialObjectMetadata (default), the whole object (`includeObject=Object`) or
 * nothing (`includeObject=None`), as kubectl expects (kubectl-wire §2.1).
 */
import type { KubeObject } from '../storage/index.ts';
import { withTypeMeta } from '../registry/meta.ts';
import type { ResourceDef } from '../registry/types.ts';

/** `includeObject=` of a Table request. */
export type IncludeObject = 'None' | 'Metadata' | 'Object';

/**
 * A Table of `items`; `columns: false` leaves the column definitions out (later watch events). A converted
 * resource's items (`def.storedAs`, events.k8s.io) are its stored objects (core Events): its cells read them as
 * kube's printers read the internal type both share, and `includeObject=Object` rows carry them converted.
 */
export function toTable(def: ResourceDef, items: KubeObject[], resourceVersion: string, include: IncludeObject, now: Date, opts: { columns?: boolean; continue?: string; remainingItemCount?: number } = {}): Record<string, unknown> {
  const metadata: Record<string, unknown> = { resourceVersion };
  if (opts.continue) metadata.continue = opts.continue;
  if (opts.remainingItemCount !== undefined) metadata.remainingItemCount = opts.remainingItemCount;
  return {
    kind: 'Table',
    apiVersion: 'meta.k8s.io/v1',
    metadata,
    columnDefinitions: opts.columns === false ? null : def.columns.map((c) => ({ name: c.name, type: c.type, format: c.format ?? '', description: c.description ?? '', priority: c.priority ?? 0 })),
    rows: items.map((o) => {
      const row: Record<string, unknown> = { cells: def.cells(o, now) };
      if (include === 'Object') row.object = def.storedAs ? withTypeMeta(def, def.storedAs.fromStored(o)) : o;
      else if (include === 'Metadata') row.object = partialMetadata(o);
      return row;
    }),
  };
}

/** The PartialObjectMetadata of an object. */
export function partialMetadata(o: KubeObject): Record<string, unknown> {
  return { kind: 'PartialObjectMetadata', apiVersion: 'meta.k8s.io/v1', metadata: o.metadata };
}
