/**
 * Request information from a URL, as Kubernetes' RequestInfoFactory derives it:
 * `/api/v1/[namespaces/<ns>/]<resource>[/<name>[/<subresource>[/<path>...]]]` and the same under
 * `/apis/<group>/<version>`.
 */
import { findResource } from '../registry/catalog.ts';
import type { ResourceDef } from '../registry/types.ts';

/** A resource request's parts. `subpath` is the raw rest of a proxy URL (still percent-encoded). */
export interface ResourceRequest {
  group: string;
  version: string;
  plural: string;
  def: ResourceDef | undefined;
  namespace: string | undefined;
  name: string | undefined;
  subresource: string | undefined;
  subpath: string;
  /** Whether the URL ends with `/` after the subresource (proxy paths keep it). */
  trailingSlash: boolean;
}

/** Parses a resource URL path; undefined when it is not one (`/api`, `/apis/<g>`, discovery). */
export function parseResourcePath(pathname: string): ResourceRequest | undefined {
  const raw = pathname.split('/').slice(1);
  const seg = raw.map((s) => {
    try {
      return decodeURIComponent(s);
    } catch {
      return s;
    }
  });
  let group: string;
  let version: string;
  let rest: string[];
  let rawRest: string[];
  if (seg[0] === 'api' && seg.length >= 3 && seg[2] !== '') {
    group = '';
    version = seg[1]!;
    rest = seg.slice(2);
    rawRest = raw.slice(2);
  } else if (seg[0] === 'apis' && seg.length >= 4 && seg[3] !== '') {
    group = seg[1]!;
    version = seg[2]!;
    rest = seg.slice(3);
    rawRest = raw.slice(3);
  } else return undefined;
  let namespace: string | undefined;
  if (rest[0] === 'namespaces' && rest.length >= 3 && rest[2] !== 'status' && rest[2] !== 'finalize' && rest[1] !== '') {
    namespace = rest[1];
    rest = rest.slice(2);
    rawRest = rawRest.slice(2);
  }
  const plural = rest[0] ?? '';
  const name = rest[1] || undefined;
  const subresource = rest[2] || undefined;
  const subpath = rawRest.slice(3).join('/');
  return {
    group,
    version,
    plural,
    def: findResource(group, version, plural),
    namespace,
    name,
    subresource,
    subpath,
    trailingSlash: rest.length > 3 && pathname.endsWith('/'),
  };
}
