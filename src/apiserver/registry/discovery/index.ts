/**
 * `discovery.k8s.io/v1` EndpointSlices: the network endpoints of a Service (label
 * `kubernetes.io/service-name`), as kube-controller-manager's EndpointSlice controller writes them and as
 * `kubectl describe service` reads them. Validation is Kubernetes' (pkg/apis/discovery/validation):
 * `addressType` IPv4, IPv6 or FQDN (immutable), at most 1000 endpoints of 1 to 100 addresses each, valid
 * for the address type (Kubernetes also refuses loopback and link-local addresses; Kube32 allows them, since
 * its nodes and pods live on loopback addresses, and refuses only the unspecified ones), at most 100 ports with unique DNS-label names and a protocol of TCP, UDP or SCTP.
 */
import { isIPv4, isIPv6 } from 'node:net';
import type { StatusCause } from '../../errors.ts';
import type { KubeObject } from '../../storage/index.ts';
import type { ResourceDef } from '../types.ts';
import { AGE_COLUMN, NAME_COLUMN, age, arr, immutable, invalidValue, required, validateLabel, validateMetaMaps, validateSubdomain } from '../util.ts';

/** The address types a new EndpointSlice may carry. */
export const ADDRESS_TYPES = ['IPv4', 'IPv6', 'FQDN'] as const;
/** An EndpointSlice's `addressType`. */
export type AddressType = (typeof ADDRESS_TYPES)[number];
/** The label naming the Service an EndpointSlice belongs to. */
export const LABEL_SERVICE_NAME = 'kubernetes.io/service-name';
/** The label naming the controller that manages an EndpointSlice. */
export const LABEL_MANAGED_BY = 'endpointslice.kubernetes.io/managed-by';

const PROTOCOLS = ['SCTP', 'TCP', 'UDP'];
const MAX_ENDPOINTS = 1000;
const MAX_ADDRESSES = 100;
const MAX_PORTS = 100;
const FQDN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$/;

function tooMany(field: string, n: number, max: number): StatusCause {
  return { reason: 'FieldValueTooMany', message: `Too many: ${n}: must have at most ${max} items`, field };
}

/** Problems of one address of `type` (Kubernetes' IsValidIPv4Address, IsValidIPv6Address, IsFullyQualifiedDomainName). */
function addressProblems(address: unknown, type: unknown, field: string): StatusCause[] {
  if (typeof address !== 'string') return [invalidValue(field, address, 'must be a string')];
  switch (type) {
    case 'IPv4':
      if (!isIPv4(address)) return [invalidValue(field, address, 'must be a valid IPv4 address')];
      return address === '0.0.0.0' ? [invalidValue(field, address, 'may not be unspecified (0.0.0.0)')] : [];
    case 'IPv6':
      if (!isIPv6(address)) return [invalidValue(field, address, 'must be a valid IPv6 address')];
      return address === '::' ? [invalidValue(field, address, 'may not be unspecified (::)')] : [];
    case 'FQDN':
      return FQDN.test(address) ? [] : [invalidValue(field, address, 'should be a domain with at least two segments separated by dots')];
    default:
      return [];
  }
}

/** Problems of `endpoints` (Kubernetes' validateEndpoints). */
function validateEndpoints(endpoints: unknown, type: unknown): StatusCause[] {
  if (endpoints === undefined || endpoints === null) return [];
  if (!Array.isArray(endpoints)) return [invalidValue('endpoints', endpoints, 'must be a list of endpoints')];
  if (endpoints.length > MAX_ENDPOINTS) return [tooMany('endpoints', endpoints.length, MAX_ENDPOINTS)];
  const out: StatusCause[] = [];
  endpoints.forEach((raw: unknown, i) => {
    const at = `endpoints[${i}]`;
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
      out.push(invalidValue(at, raw, 'must be an endpoint object'));
      return;
    }
    const ep = raw as Record<string, unknown>;
    const addresses = ep.addresses;
    if (addresses !== undefined && !Array.isArray(addresses)) out.push(invalidValue(`${at}.addresses`, addresses, 'must be a list of strings'));
    else if (!addresses || addresses.length === 0) out.push({ reason: 'FieldValueRequired', message: 'Required value: must contain at least 1 address', field: `${at}.addresses` });
    else if (addresses.length > MAX_ADDRESSES) out.push(tooMany(`${at}.addresses`, addresses.length, MAX_ADDRESSES));
    else {
      addresses.forEach((a: unknown, j) => {
        out.push(...addressProblems(a, type, `${at}.addresses[${j}]`));
      });
    }
    const conditions = ep.conditions;
    if (conditions !== undefined && conditions !== null) {
      if (typeof conditions !== 'object' || Array.isArray(conditions)) out.push(invalidValue(`${at}.conditions`, conditions, 'must be an object'));
      else {
        for (const c of ['ready', 'serving', 'terminating']) {
          const v = (conditions as Record<string, unknown>)[c];
          if (v !== undefined && v !== null && typeof v !== 'boolean') out.push(invalidValue(`${at}.conditions.${c}`, v, 'must be a boolean'));
        }
      }
    }
    if (ep.hostname !== undefined && ep.hostname !== null) out.push(...validateLabel(typeof ep.hostname === 'string' ? ep.hostname : String(ep.hostname), `${at}.hostname`));
    if (ep.nodeName !== undefined && ep.nodeName !== null) out.push(...validateSubdomain(typeof ep.nodeName === 'string' ? ep.nodeName : String(ep.nodeName), `${at}.nodeName`));
    if (ep.targetRef !== undefined && ep.targetRef !== null && (typeof ep.targetRef !== 'object' || Array.isArray(ep.targetRef))) out.push(invalidValue(`${at}.targetRef`, ep.targetRef, 'must be an object reference'));
  });
  return out;
}

/** Problems of `ports` (Kubernetes' validatePorts, and a port number within 0..65535). */
function validatePorts(ports: unknown): StatusCause[] {
  if (ports === undefined || ports === null) return [];
  if (!Array.isArray(ports)) return [invalidValue('ports', ports, 'must be a list of ports')];
  if (ports.length > MAX_PORTS) return [tooMany('ports', ports.length, MAX_PORTS)];
  const out: StatusCause[] = [];
  const names = new Set<string>();
  ports.forEach((raw: unknown, i) => {
    const at = `ports[${i}]`;
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
      out.push(invalidValue(at, raw, 'must be a port object'));
      return;
    }
    const p = raw as Record<string, unknown>;
    const name = p.name ?? '';
    if (typeof name !== 'string') out.push(invalidValue(`${at}.name`, name, 'must be a string'));
    else {
      if (name !== '') out.push(...validateLabel(name, `${at}.name`));
      if (names.has(name)) out.push({ reason: 'FieldValueDuplicate', message: `Duplicate value: "${name}"`, field: `${at}.name` });
      names.add(name);
    }
    if (p.protocol === undefined || p.protocol === null) out.push(required(`${at}.protocol`));
    else if (!PROTOCOLS.includes(String(p.protocol))) {
      out.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: ${JSON.stringify(p.protocol)}: supported values: ${PROTOCOLS.map((x) => `"${x}"`).join(', ')}`, field: `${at}.protocol` });
    }
    if (p.port !== undefined && p.port !== null && (typeof p.port !== 'number' || !Number.isInteger(p.port) || p.port < 0 || p.port > 65535)) {
      out.push(invalidValue(`${at}.port`, p.port, 'must be between 0 and 65535, inclusive'));
    }
  });
  return out;
}

/** Defaults Kubernetes sets on a slice's ports: protocol TCP, name "". */
function defaultPorts(obj: KubeObject): void {
  for (const p of arr(obj.ports)) {
    p.protocol ??= 'TCP';
    p.name ??= '';
  }
}

/** The Ports column: up to three port numbers (a name, or `*`, when unset), then `+ N more...`; `<unset>` when none. */
function portsCell(o: KubeObject): string {
  const list = arr(o.ports).map((p) => (typeof p.port === 'number' ? String(p.port) : typeof p.name === 'string' && p.name !== '' ? p.name : '*'));
  return moreList(list);
}

/** The Endpoints column: up to three addresses, then `+ N more...`; `<unset>` when none. */
function endpointsCell(o: KubeObject): string {
  const list = arr(o.endpoints).flatMap((e) => (Array.isArray(e.addresses) ? e.addresses.map(String) : []));
  return moreList(list);
}

function moreList(list: string[]): string {
  if (list.length === 0) return '<unset>';
  if (list.length > 3) return `${list.slice(0, 3).join(',')} + ${list.length - 3} more...`;
  return list.join(',');
}

/**
 * endpointslices (`discovery.k8s.io/v1` EndpointSlice, namespaced, no short name): printed as kube-apiserver
 * prints them (Name, AddressType, Ports, Endpoints, Age).
 */
export const endpointslices: ResourceDef = {
  group: 'discovery.k8s.io',
  version: 'v1',
  kind: 'EndpointSlice',
  listKind: 'EndpointSliceList',
  plural: 'endpointslices',
  singular: 'endpointslice',
  namespaced: true,
  subresources: [],
  hasStatus: false,
  fields: ['addressType', 'endpoints', 'ports'],
  prepareForCreate: defaultPorts,
  prepareForUpdate: defaultPorts,
  validate(obj, old) {
    const out = [...validateSubdomain(obj.metadata.name, 'metadata.name'), ...validateMetaMaps(obj)];
    if (obj.addressType === undefined || obj.addressType === null || obj.addressType === '') out.push(required('addressType'));
    else if (!(ADDRESS_TYPES as readonly unknown[]).includes(obj.addressType) && !(old && old.addressType === 'IP' && obj.addressType === 'IP')) {
      out.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: ${JSON.stringify(obj.addressType)}: supported values: "FQDN", "IPv4", "IPv6"`, field: 'addressType' });
    }
    if (old && old.addressType !== obj.addressType) out.push(immutable('addressType'));
    out.push(...validateEndpoints(obj.endpoints, obj.addressType), ...validatePorts(obj.ports));
    return out;
  },
  columns: [
    NAME_COLUMN,
    { name: 'AddressType', type: 'string' },
    { name: 'Ports', type: 'string' },
    { name: 'Endpoints', type: 'string' },
    AGE_COLUMN,
  ],
  cells: (o, now) => [o.metadata.name, o.addressType ?? '', portsCell(o), endpointsCell(o), age(o.metadata.creationTimestamp, now)],
};
