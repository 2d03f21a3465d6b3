/**
 * The simple core (`v1`) resources: config maps, secrets, service accounts, services, endpoints,
 * events; and `coordination.k8s.io/v1` leases. Each with the Table columns kubectl prints for it.
 */
import type { StatusCause } from '../../errors.ts';
import type { KubeObject } from '../../storage/index.ts';
import { base64Error, mapFieldError, scalarError } from '../field-types.ts';
import type { ResourceDef } from '../types.ts';
import { AGE_COLUMN, MAX_DATA_BYTES, NAME_COLUMN, age, arr, invalidValue, immutable, rec, required, tooLong, validateLabel, validateMetaMaps, validateSubdomain } from '../util.ts';

const base = (obj: KubeObject) => [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj)];

/** kube's message for a change of an immutable ConfigMap's or Secret's `field`. */
const IMMUTABLE_SET = 'Forbidden: field is immutable when `immutable` is set';

/** An immutable ConfigMap's or Secret's fields that may not change (kube's ValidateConfigMapUpdate, ValidateSecretUpdate). */
function immutableChanges(obj: KubeObject, old: KubeObject | undefined, fields: string[]): StatusCause[] {
  if (old?.immutable !== true) return [];
  const out: StatusCause[] = [];
  if (obj.immutable !== true) out.push({ reason: 'FieldValueForbidden', message: IMMUTABLE_SET, field: 'immutable' });
  for (const f of fields) {
    if (!sameMap(obj[f], old[f])) out.push({ reason: 'FieldValueForbidden', message: IMMUTABLE_SET, field: f });
  }
  return out;
}

/** Whether two string maps hold the same entries (an empty map is none, as Go's DeepEqual of decoded maps nearly is). */
function sameMap(a: unknown, b: unknown): boolean {
  const x = Object.entries(rec(a)).sort(([k], [l]) => (k < l ? -1 : k > l ? 1 : 0));
  const y = Object.entries(rec(b)).sort(([k], [l]) => (k < l ? -1 : k > l ? 1 : 0));
  return JSON.stringify(x) === JSON.stringify(y);
}

/** config maps */
export const configmaps: ResourceDef = {
  group: '',
  version: 'v1',
  kind: 'ConfigMap',
  listKind: 'ConfigMapList',
  plural: 'configmaps',
  singular: 'configmap',
  namespaced: true,
  shortNames: ['cm'],
  subresources: [],
  hasStatus: false,
  fields: ['data', 'binaryData', 'immutable'],
  decodeError: (obj) =>
    mapFieldError(obj.data, 'ConfigMap', 'data', 'string') ??
    mapFieldError(obj.binaryData, 'ConfigMap', 'binaryData', 'bytes') ??
    scalarError(obj.immutable, 'bool', 'ConfigMap', 'immutable'),
  validate(obj, old) {
    const out = base(obj);
    for (const [k, v] of Object.entries(rec(obj.data))) if (typeof v !== 'string') out.push(invalidValue(`data[${k}]`, v, 'must be a string'));
    for (const [k, v] of Object.entries(rec(obj.binaryData))) if (typeof v !== 'string' || base64Error(v)) out.push(invalidValue(`binaryData[${k}]`, '<binary>', 'must be base64-encoded'));
    // As Kubernetes counts it: keys and values of data, keys and decoded values of binaryData.
    let bytes = 0;
    for (const [k, v] of Object.entries(rec(obj.data))) bytes += k.length + (typeof v === 'string' ? Buffer.byteLength(v) : 0);
    for (const [k, v] of Object.entries(rec(obj.binaryData))) bytes += k.length + (typeof v === 'string' ? Buffer.from(v, 'base64').length : 0);
    if (bytes > MAX_DATA_BYTES) out.push(tooLong('data', MAX_DATA_BYTES));
    out.push(...immutableChanges(obj, old, ['data', 'binaryData']));
    return out;
  },
  columns: [NAME_COLUMN, { name: 'Data', type: 'integer', description: 'Number of data entries' }, AGE_COLUMN],
  cells: (o, now) => [o.metadata.name, Object.keys(rec(o.data)).length + Object.keys(rec(o.binaryData)).length, age(o.metadata.creationTimestamp, now)],
};

function foldStringData(obj: KubeObject): void {
  if (obj.stringData && typeof obj.stringData === 'object') {
    const data = { ...rec(obj.data) };
    for (const [k, v] of Object.entries(rec(obj.stringData))) data[k] = Buffer.from(String(v)).toString('base64');
    obj.data = data;
    delete obj.stringData;
  }
}

/** secrets */
export const secrets: ResourceDef = {
  group: '',
  version: 'v1',
  kind: 'Secret',
  listKind: 'SecretList',
  plural: 'secrets',
  singular: 'secret',
  namespaced: true,
  subresources: [],
  hasStatus: false,
  fields: ['data', 'stringData', 'type', 'immutable'],
  decodeError: (obj) =>
    mapFieldError(obj.data, 'Secret', 'data', 'bytes') ??
    mapFieldError(obj.stringData, 'Secret', 'stringData', 'string') ??
    scalarError(obj.type, 'string', 'Secret', 'type')?.replace(/string$/, 'v1.SecretType') ??
    scalarError(obj.immutable, 'bool', 'Secret', 'immutable'),
  prepareForCreate(obj) {
    foldStringData(obj);
    if (!obj.type) obj.type = 'Opaque';
  },
  prepareForUpdate(obj) {
    foldStringData(obj);
    if (!obj.type) obj.type = 'Opaque';
  },
  validate(obj, old) {
    const out = base(obj);
    for (const f of ['data', 'stringData']) {
      if (obj[f] !== undefined && (obj[f] === null || typeof obj[f] !== 'object' || Array.isArray(obj[f]))) out.push(invalidValue(f, '<secret contents redacted>', 'must be a map'));
    }
    let bytes = 0;
    for (const [k, v] of Object.entries(rec(obj.data))) {
      if (typeof v !== 'string' || base64Error(v)) out.push(invalidValue(`data[${k}]`, '<secret contents redacted>', 'must be base64-encoded'));
      else bytes += Buffer.from(v, 'base64').length;
    }
    if (bytes > MAX_DATA_BYTES) out.push(tooLong('data', MAX_DATA_BYTES));
    if (old && old.type !== obj.type) out.push(immutable('type'));
    out.push(...immutableChanges(obj, old, ['data']));
    return out;
  },
  fieldSelectors: { type: (o) => o.type as string | undefined },
  columns: [NAME_COLUMN, { name: 'Type', type: 'string' }, { name: 'Data', type: 'integer' }, AGE_COLUMN],
  cells: (o, now) => [o.metadata.name, o.type ?? 'Opaque', Object.keys(rec(o.data)).length, age(o.metadata.creationTimestamp, now)],
};

/** service accounts */
export const serviceaccounts: ResourceDef = {
  group: '',
  version: 'v1',
  kind: 'ServiceAccount',
  listKind: 'ServiceAccountList',
  plural: 'serviceaccounts',
  singular: 'serviceaccount',
  namespaced: true,
  shortNames: ['sa'],
  subresources: [],
  hasStatus: false,
  fields: ['secrets', 'imagePullSecrets', 'automountServiceAccountToken'],
  validate: base,
  columns: [NAME_COLUMN, { name: 'Secrets', type: 'string' }, AGE_COLUMN],
  cells: (o, now) => [o.metadata.name, arr(o.secrets).length, age(o.metadata.creationTimestamp, now)],
};

/** The cluster IP of the `kubernetes` service in `default`, the first of the range. */
export const KUBERNETES_SERVICE_IP = '10.96.0.1';

/** Allocates a free cluster IP from 10.96.0.0/12 (from 10.96.0.2 up; 10.96.0.1 is the kubernetes service). */
function allocateClusterIp(taken: Set<string>): string {
  for (let i = 2; i < 1 << 20; i++) {
    const n = (10 << 24) + (96 << 16) + i;
    const ip = `${(n >>> 24) & 255}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
    if (!taken.has(ip) && (n & 255) !== 0 && (n & 255) !== 255) return ip;
  }
  throw new Error('service cluster IP range 10.96.0.0/12 is full');
}

function servicePorts(o: KubeObject): string {
  const ps = arr(rec(o.spec).ports);
  if (ps.length === 0) return '<none>';
  return ps.map((p) => `${String(p.port)}${p.nodePort ? `:${String(p.nodePort)}` : ''}/${String(p.protocol ?? 'TCP')}`).join(',');
}

/** services */
export const services: ResourceDef = {
  group: '',
  version: 'v1',
  kind: 'Service',
  listKind: 'ServiceList',
  plural: 'services',
  singular: 'service',
  namespaced: true,
  shortNames: ['svc'],
  categories: ['all'],
  subresources: ['status', 'proxy'],
  hasStatus: true,
  fields: ['spec', 'status'],
  prepareForCreate(obj) {
    const spec = rec(obj.spec);
    obj.spec = spec;
    spec.type ??= 'ClusterIP';
    spec.sessionAffinity ??= 'None';
    spec.internalTrafficPolicy ??= 'Cluster';
    spec.ipFamilies ??= ['IPv4'];
    spec.ipFamilyPolicy ??= 'SingleStack';
    for (const p of arr(spec.ports)) {
      p.protocol ??= 'TCP';
      p.targetPort ??= p.port;
    }
    if (spec.clusterIP === 'None') spec.clusterIPs ??= ['None'];
    obj.status = { loadBalancer: {} };
  },
  // Inside the create's transaction (issue 11): the list of services is compared at commit, so two API
  // servers creating Services at once never hand out one IP; a requested IP already taken is Invalid.
  async allocate(obj, ctx) {
    const spec = rec(obj.spec);
    if (spec.type === 'ExternalName' || spec.clusterIP === 'None') return [];
    const self = `${obj.metadata.namespace}/${obj.metadata.name}`;
    const taken = new Set((await ctx.list('services')).filter((s) => `${s.metadata.namespace}/${s.metadata.name}` !== self).map((s) => String(rec(s.spec).clusterIP)));
    if (spec.clusterIP === undefined || spec.clusterIP === '') spec.clusterIP = allocateClusterIp(taken);
    else if (taken.has(String(spec.clusterIP))) {
      return [invalidValue('spec.clusterIPs', [spec.clusterIP], `failed to allocate IP ${String(spec.clusterIP)}: provided IP is already allocated`)];
    }
    spec.clusterIPs ??= [spec.clusterIP];
    return [];
  },
  prepareForUpdate(obj, old) {
    const spec = rec(obj.spec);
    obj.spec = spec;
    const oldSpec = rec(old.spec);
    spec.clusterIP ??= oldSpec.clusterIP;
    spec.clusterIPs ??= oldSpec.clusterIPs;
    spec.type ??= 'ClusterIP';
    spec.sessionAffinity ??= 'None';
    for (const p of arr(spec.ports)) {
      p.protocol ??= 'TCP';
      p.targetPort ??= p.port;
    }
  },
  validate(obj, old) {
    const out = [...validateLabel(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj)];
    const spec = rec(obj.spec);
    if (spec.ports !== undefined && (!Array.isArray(spec.ports) || spec.ports.some((p) => p === null || typeof p !== 'object'))) out.push(invalidValue('spec.ports', spec.ports, 'must be a list of ports'));
    if (spec.selector !== undefined && (spec.selector === null || typeof spec.selector !== 'object' || Array.isArray(spec.selector))) out.push(invalidValue('spec.selector', spec.selector, 'must be a map of labels'));
    arr(spec.ports).forEach((p, i) => {
      if (typeof p.port !== 'number' || p.port < 1 || p.port > 65535) out.push(invalidValue(`spec.ports[${i}].port`, p.port, 'must be between 1 and 65535, inclusive'));
      const np = p.nodePort;
      if (typeof np === 'number' && np !== 0 && (np < 1 || np > 65535)) out.push(invalidValue(`spec.ports[${i}].nodePort`, np, 'must be between 1 and 65535, inclusive'));
    });
    if (spec.type !== 'ExternalName' && spec.clusterIP !== 'None' && arr(spec.ports).length === 0) out.push(required('spec.ports'));
    if (old && rec(old.spec).clusterIP && rec(old.spec).clusterIP !== spec.clusterIP) out.push(immutable('spec.clusterIP'));
    return out;
  },
  columns: [
    NAME_COLUMN,
    { name: 'Type', type: 'string' },
    { name: 'Cluster-IP', type: 'string' },
    { name: 'External-IP', type: 'string' },
    { name: 'Port(s)', type: 'string' },
    AGE_COLUMN,
    { name: 'Selector', type: 'string', priority: 1 },
  ],
  cells(o, now) {
    const spec = rec(o.spec);
    const ext = arr(spec.externalIPs).length ? (spec.externalIPs as string[]).join(',') : spec.type === 'LoadBalancer' ? '<pending>' : '<none>';
    const sel = Object.entries(rec(spec.selector)).map(([k, v]) => `${k}=${String(v)}`).join(',') || '<none>';
    return [o.metadata.name, spec.type ?? 'ClusterIP', spec.clusterIP ?? '<none>', ext, servicePorts(o), age(o.metadata.creationTimestamp, now), sel];
  },
};

/** endpoints */
export const endpoints: ResourceDef = {
  group: '',
  version: 'v1',
  kind: 'Endpoints',
  listKind: 'EndpointsList',
  plural: 'endpoints',
  singular: 'endpoints',
  namespaced: true,
  shortNames: ['ep'],
  subresources: [],
  hasStatus: false,
  fields: ['subsets'],
  validate: base,
  columns: [NAME_COLUMN, { name: 'Endpoints', type: 'string' }, AGE_COLUMN],
  cells(o, now) {
    const eps: string[] = [];
    for (const s of arr(o.subsets)) {
      const ports = arr(s.ports);
      for (const a of arr(s.addresses)) {
        if (ports.length === 0) eps.push(String(a.ip));
        for (const p of ports) eps.push(`${String(a.ip)}:${String(p.port)}`);
      }
    }
    const text = eps.length === 0 ? '<none>' : eps.length > 3 ? `${eps.slice(0, 3).join(',')} + ${eps.length - 3} more...` : eps.join(',');
    return [o.metadata.name, text, age(o.metadata.creationTimestamp, now)];
  },
};

/**
 * replication controllers: served so that lists of them answer (empty), as `kubectl cluster-info dump`
 * and other clients walking the core group expect, but none can be made: no controller runs them.
 */
export const replicationcontrollers: ResourceDef = {
  group: '',
  version: 'v1',
  kind: 'ReplicationController',
  listKind: 'ReplicationControllerList',
  plural: 'replicationcontrollers',
  singular: 'replicationcontroller',
  namespaced: true,
  shortNames: ['rc'],
  subresources: [],
  hasStatus: false,
  fields: ['spec'],
  validate: () => [{ reason: 'FieldValueForbidden', message: 'Forbidden: Kube32 does not run ReplicationControllers: use a Deployment (apps/v1)', field: 'kind' }],
  columns: [NAME_COLUMN, AGE_COLUMN],
  cells: (o, now) => [o.metadata.name, age(o.metadata.creationTimestamp, now)],
};

function eventTime(o: KubeObject, which: 'first' | 'last'): unknown {
  const series = rec(o.series);
  if (which === 'last') return o.lastTimestamp ?? series.lastObservedTime ?? o.eventTime ?? o.firstTimestamp ?? o.metadata.creationTimestamp;
  return o.firstTimestamp ?? o.eventTime ?? o.metadata.creationTimestamp;
}

/** events (core v1) */
export const events: ResourceDef = {
  group: '',
  version: 'v1',
  kind: 'Event',
  listKind: 'EventList',
  plural: 'events',
  singular: 'event',
  namespaced: true,
  shortNames: ['ev'],
  subresources: [],
  hasStatus: false,
  fields: [
    'involvedObject',
    'reason',
    'message',
    'source',
    'firstTimestamp',
    'lastTimestamp',
    'count',
    'type',
    'eventTime',
    'series',
    'action',
    'related',
    'reportingComponent',
    'reportingInstance',
  ],
  validate(obj) {
    const out = base(obj);
    const io = rec(obj.involvedObject);
    if (obj.involvedObject === undefined) out.push(required('involvedObject'));
    else if (obj.involvedObject === null || typeof obj.involvedObject !== 'object' || Array.isArray(obj.involvedObject)) out.push(invalidValue('involvedObject', obj.involvedObject, 'must be an object reference'));
    else if (io.namespace && obj.metadata.namespace && io.namespace !== obj.metadata.namespace) {
      out.push(invalidValue('involvedObject.namespace', io.namespace, 'does not match event.namespace'));
    }
    return out;
  },
  fieldSelectors: {
    'involvedObject.kind': (o) => (rec(o.involvedObject).kind as string | undefined) ?? '',
    'involvedObject.namespace': (o) => (rec(o.involvedObject).namespace as string | undefined) ?? '',
    'involvedObject.name': (o) => (rec(o.involvedObject).name as string | undefined) ?? '',
    'involvedObject.uid': (o) => (rec(o.involvedObject).uid as string | undefined) ?? '',
    'involvedObject.apiVersion': (o) => (rec(o.involvedObject).apiVersion as string | undefined) ?? '',
    'involvedObject.resourceVersion': (o) => (rec(o.involvedObject).resourceVersion as string | undefined) ?? '',
    'involvedObject.fieldPath': (o) => (rec(o.involvedObject).fieldPath as string | undefined) ?? '',
    reason: (o) => (o.reason as string | undefined) ?? '',
    reportingComponent: (o) => (o.reportingComponent as string | undefined) ?? '',
    source: (o) => (rec(o.source).component as string | undefined) ?? '',
    type: (o) => (o.type as string | undefined) ?? '',
  },
  columns: [
    { name: 'Last Seen', type: 'string' },
    { name: 'Type', type: 'string' },
    { name: 'Reason', type: 'string' },
    { name: 'Object', type: 'string' },
    { name: 'Subobject', type: 'string', priority: 1 },
    { name: 'Source', type: 'string', priority: 1 },
    { name: 'Message', type: 'string' },
    { name: 'First Seen', type: 'string', priority: 1 },
    { name: 'Count', type: 'integer', priority: 1 },
    { name: 'Name', type: 'string', format: 'name', priority: 1 },
  ],
  cells(o, now) {
    const io = rec(o.involvedObject);
    const src = rec(o.source);
    const source = src.component ? `${String(src.component)}${src.host ? `, ${String(src.host)}` : ''}` : o.reportingController ? `${String(o.reportingController)}, ${String(o.reportingInstance ?? '')}` : '';
    const count = Number(o.count ?? rec(o.series).count ?? 1) || 1;
    return [
      age(eventTime(o, 'last'), now),
      o.type ?? '',
      o.reason ?? '',
      `${String(io.kind ?? '').toLowerCase()}/${String(io.name ?? '')}`,
      io.fieldPath ?? '',
      source,
      String(o.message ?? '').trim(),
      age(eventTime(o, 'first'), now),
      count,
      o.metadata.name,
    ];
  },
};

/** leases (coordination.k8s.io/v1) */
export const leases: ResourceDef = {
  group: 'coordination.k8s.io',
  version: 'v1',
  kind: 'Lease',
  listKind: 'LeaseList',
  plural: 'leases',
  singular: 'lease',
  namespaced: true,
  subresources: [],
  hasStatus: false,
  fields: ['spec'],
  validate(obj) {
    const out = base(obj);
    const d = rec(obj.spec).leaseDurationSeconds;
    if (d !== undefined && (typeof d !== 'number' || d <= 0)) out.push(invalidValue('spec.leaseDurationSeconds', d, 'must be greater than 0'));
    return out;
  },
  columns: [NAME_COLUMN, { name: 'Holder', type: 'string' }, AGE_COLUMN],
  cells: (o, now) => [o.metadata.name, rec(o.spec).holderIdentity ?? '', age(o.metadata.creationTimestamp, now)],
};
