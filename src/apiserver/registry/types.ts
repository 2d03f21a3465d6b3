/**
 * What the registry knows of one resource: its names (for discovery and URLs), its strategy
 * (defaults, validation, what create and update may change) and how it prints as a Table.
 * Each resource's `registry/<resource>/index.ts` exports one or more `ResourceDef`s; the handlers
 * route only the verbs and subresources a definition declares.
 */
import type { StatusCause } from '../errors.ts';
import type { KubeObject } from '../storage/index.ts';

/** One Table column (`metav1.TableColumnDefinition`); priority 1 columns show only with `-o wide`. */
export interface Column {
  name: string;
  type: 'string' | 'integer' | 'number' | 'boolean' | 'date';
  format?: string;
  priority?: number;
  description?: string;
}

/** The subresources a resource may have. */
export type Subresource = 'status' | 'scale' | 'eviction' | 'log' | 'proxy' | 'binding' | 'replace' | 'data';

/** Context a strategy sees: the time of the request and a reader of other objects. */
export interface StrategyContext {
  now: Date;
  /** Reads another object (for defaults that depend on the cluster, e.g. a Service's cluster IP). */
  list(resource: string, namespace?: string): Promise<KubeObject[]>;
}

/** One resource's rules. */
export interface ResourceDef {
  group: string;
  version: string;
  kind: string;
  listKind: string;
  plural: string;
  singular: string;
  namespaced: boolean;
  shortNames?: string[];
  categories?: string[];
  /** Subresources served under `<name>/<subresource>`. */
  subresources: Subresource[];
  /** Whether spec and status are written apart (main writes keep status, `/status` writes only status). */
  hasStatus: boolean;
  /** Scale subresource paths, for `hasScale` resources. */
  scale?: { specReplicas: string[]; statusReplicas: string[]; selector: string[] };
  /** Top-level fields a valid object may carry besides apiVersion, kind and metadata (strict field validation). */
  fields: string[];
  /**
   * Go's decoding error for a top-level field of the wrong JSON type (`json: cannot unmarshal number into Go
   * struct field ConfigMap.data of type string`, `illegal base64 data at input byte 3`), or undefined: the body
   * is then refused with 400 BadRequest, as kube-apiserver's decoder refuses it, whatever the field validation.
   */
  decodeError?(obj: Record<string, unknown>): string | undefined;
  /** Sets defaults on a new object (after status was cleared), in place. */
  prepareForCreate?(obj: KubeObject, ctx: StrategyContext): void;
  /**
   * Allocations that must be unique across API servers (a Service's cluster IP), in place: runs inside the
   * create's storage transaction on a fresh copy at each attempt, so its reads (`ctx.list`) are compared at
   * commit and a concurrent allocation elsewhere makes it run again. Answers the problems (Invalid).
   */
  allocate?(obj: KubeObject, ctx: StrategyContext): StatusCause[] | Promise<StatusCause[]>;
  /** Normalizes an update of the main resource, in place (defaults again, immutable fields kept). */
  prepareForUpdate?(obj: KubeObject, old: KubeObject, ctx: StrategyContext): void;
  /** Problems of an object; pure. `old` is given on update. */
  validate?(obj: KubeObject, old?: KubeObject): StatusCause[];
  /** Field selector keys beyond metadata.name and metadata.namespace, each reading the field as a string. */
  fieldSelectors?: Record<string, (obj: KubeObject) => string | undefined>;
  /** Table columns, the first being Name (format name). */
  columns: Column[];
  /** One Table row's cells, in `columns` order. */
  cells(obj: KubeObject, now: Date): unknown[];
  /**
   * A resource stored as another one (events.k8s.io/v1 Events are core Events): requests are
   * served by converting to and from the stored resource.
   */
  storedAs?: { def: ResourceDef; toStored(obj: KubeObject): KubeObject; fromStored(obj: KubeObject): KubeObject };
  /** Seconds of graceful deletion by default (pods: spec.terminationGracePeriodSeconds); undefined: deleted at once. */
  gracePeriod?(obj: KubeObject): number | undefined;
}

/** `group/plural` as the storage key (`pods`, `deployments.apps`). */
export function storageKey(def: Pick<ResourceDef, 'group' | 'plural' | 'storedAs'>): string {
  if (def.storedAs) return storageKey(def.storedAs.def);
  return def.group ? `${def.plural}.${def.group}` : def.plural;
}

/** `apiVersion` of a definition (`v1`, `apps/v1`). */
export function apiVersionOf(def: Pick<ResourceDef, 'group' | 'version'>): string {
  return def.group ? `${def.group}/${def.version}` : def.version;
}

/** The standard verbs every stored resource supports. */
export const STANDARD_VERBS = ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'] as const;
