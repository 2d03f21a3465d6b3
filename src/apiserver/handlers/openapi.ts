/**
 * OpenAPI v3 (`/openapi/v3` and one document per group-version): every kind's PATCH operation
 * lists `fieldValidation`, so kubectl leaves validation to the server (kubectl-wire §1.5), and
 * `components.schemas` describe each kind for `kubectl explain` (the Checkpoint and Module in full,
 * the built-in kinds at their top level). `/openapi/v2` is not served (kubectl only reads it as
 * protobuf).
 */
import { createHash } from 'node:crypto';
import { RESOURCES, groupVersions } from '../registry/catalog.ts';
import type { ResourceDef } from '../registry/types.ts';

type Schema = Record<string, unknown>;

const str = (description: string): Schema => ({ type: 'string', description });
const int = (description: string): Schema => ({ type: 'integer', format: 'int64', description });
const obj = (description: string, properties?: Record<string, Schema>, required?: string[]): Schema => {
  const s: Schema = { type: 'object', description };
  if (properties) s.properties = properties;
  if (required) s.required = required;
  return s;
};

const OBJECT_META_REF = '#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta';
const OBJECT_META: Schema = obj('ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.', {
  name: str('Name must be unique within a namespace.'),
  generateName: str('GenerateName is an optional prefix, used by the server, to generate a unique name ONLY IF the Name field has not been provided.'),
  namespace: str('Namespace defines the space within which each name must be unique.'),
  uid: str('UID is the unique in time and space value for this object, set by the server on create.'),
  resourceVersion: str('An opaque value that represents the internal version of this object, for optimistic concurrency and watch.'),
  generation: int('A sequence number representing a specific generation of the desired state.'),
  creationTimestamp: { type: 'string', format: 'date-time', description: 'The time this object was created, set by the server.' },
  deletionTimestamp: { type: 'string', format: 'date-time', description: 'The time after which this resource will be deleted, set by the server when a graceful deletion is requested.' },
  deletionGracePeriodSeconds: int('Seconds allowed for this object to gracefully terminate before it is removed.'),
  labels: { type: 'object', additionalProperties: { type: 'string' }, description: 'Map of string keys and values that can be used to organize and categorize (scope and select) objects.' },
  annotations: { type: 'object', additionalProperties: { type: 'string' }, description: 'An unstructured key value map stored with a resource.' },
  ownerReferences: { type: 'array', items: { type: 'object' }, description: 'Objects this object depends on; when all owners are deleted, this object is garbage collected.' },
  finalizers: { type: 'array', items: { type: 'string' }, description: 'Must be empty before the object is deleted from the registry.' },
});

const CHECKPOINT_SCHEMA = {
  spec: obj(
    'What to save or move.',
    {
      podName: str('The pod, required.'),
      containerName: str('Its container. Default: the only container.'),
      action: str('Save (the default) or Move.'),
      target: obj('For Move: nodeName or nodeSelector; none: the scheduler picks.', {
        nodeName: str('The node to move to.'),
        nodeSelector: { type: 'object', additionalProperties: { type: 'string' }, description: "Labels the target must have, added to the pod's own." },
      }),
    },
    ['podName'],
  ),
  status: obj('The outcome, written by the checkpoint controller through the status subresource.', {
    phase: str('Pending, Saving, Saved, Moving, Completed or Failed.'),
    nodeName: str('Where the snapshot was taken.'),
    takenAt: { type: 'string', format: 'date-time', description: 'When the snapshot was taken.' },
    sizeBytes: int('Bytes of the stored snapshot.'),
    snapshotSha256: str("The snapshot's trailer: SHA-256 of the bytes before it."),
    imageSha256: str("SHA-256 of the pod's module."),
    podTimeMs: int("The pod's clock at the snapshot, in ms."),
    targetNode: str('The node the pod moved to.'),
    newPodName: str('The replacement pod.'),
    message: str('The outcome in words.'),
    blockers: { type: 'array', items: { type: 'string' }, description: 'Every reason the pod cannot move.' },
  }),
};

const MODULE_SCHEMA = {
  spec: obj('The stored WebAssembly module of pod images wasm://NAME; PUT its bytes to the data subresource.', {
    sha256: str("SHA-256 of the module's bytes, hex."),
    sizeBytes: int('Size of the module in bytes.'),
  }),
};

const GROUP_PREFIX: Record<string, string> = { '': 'io.k8s.api.core', apps: 'io.k8s.api.apps', 'coordination.k8s.io': 'io.k8s.api.coordination', policy: 'io.k8s.api.policy', 'kube32.io': 'io.kube32' };

function schemaName(def: ResourceDef): string {
  return `${GROUP_PREFIX[def.group] ?? def.group}.${def.version}.${def.kind}`;
}

function kindSchema(def: ResourceDef): Schema {
  const props: Record<string, Schema> = {
    apiVersion: str('APIVersion defines the versioned schema of this representation of an object.'),
    kind: str('Kind is a string value representing the REST resource this object represents.'),
    metadata: { allOf: [{ $ref: OBJECT_META_REF }], description: "Standard object's metadata." },
  };
  const extra = def.kind === 'Checkpoint' ? CHECKPOINT_SCHEMA : def.kind === 'Module' ? MODULE_SCHEMA : undefined;
  for (const f of def.fields) props[f] = extra?.[f as keyof typeof extra] ?? obj(`${f} of the ${def.kind}.`);
  const description =
    def.kind === 'Checkpoint'
      ? "A Checkpoint saves a pod's state (Save) or moves the pod to another node with its state (Move). Its snapshot is the data subresource."
      : def.kind === 'Module'
        ? 'A WebAssembly module stored for pod images wasm://NAME, content-addressed by its SHA-256.'
        : `${def.kind} (${def.group || 'core'}/${def.version}).`;
  return { type: 'object', description, properties: props, 'x-kubernetes-group-version-kind': [{ group: def.group, version: def.version, kind: def.kind }] };
}

function gvPath(group: string, version: string): string {
  return group ? `apis/${group}/${version}` : `api/${version}`;
}

const docs = new Map<string, { body: string; hash: string }>();
for (const { group, version } of groupVersions()) {
  const defs = RESOURCES.filter((r) => r.group === group && r.version === version);
  const paths: Record<string, unknown> = {};
  const schemas: Record<string, Schema> = { 'io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta': OBJECT_META };
  for (const def of defs) {
    const base = `/${gvPath(group, version)}${def.namespaced ? '/namespaces/{namespace}' : ''}/${def.plural}/{name}`;
    const gvk = { group, version, kind: def.kind };
    const params = [
      { name: 'dryRun', in: 'query', schema: { type: 'string', uniqueItems: true } },
      { name: 'fieldManager', in: 'query', schema: { type: 'string', uniqueItems: true } },
      { name: 'fieldValidation', in: 'query', schema: { type: 'string', uniqueItems: true } },
    ];
    const ref = { $ref: `#/components/schemas/${schemaName(def)}` };
    paths[base] = {
      get: { operationId: `read${def.kind}`, 'x-kubernetes-action': 'get', 'x-kubernetes-group-version-kind': gvk, responses: { '200': { content: { 'application/json': { schema: ref } } } } },
      put: { operationId: `replace${def.kind}`, 'x-kubernetes-action': 'put', 'x-kubernetes-group-version-kind': gvk, parameters: params, requestBody: { content: { '*/*': { schema: ref } } } },
      patch: { operationId: `patch${def.kind}`, 'x-kubernetes-action': 'patch', 'x-kubernetes-group-version-kind': gvk, parameters: [...params, { name: 'force', in: 'query', schema: { type: 'boolean' } }] },
      delete: { operationId: `delete${def.kind}`, 'x-kubernetes-action': 'delete', 'x-kubernetes-group-version-kind': gvk },
    };
    schemas[schemaName(def)] = kindSchema(def);
  }
  const doc = { openapi: '3.0.0', info: { title: 'Kubernetes', version: 'v1.32.0-kube32' }, paths, components: { schemas } };
  const body = JSON.stringify(doc);
  docs.set(gvPath(group, version), { body, hash: createHash('sha512').update(body).digest('hex').slice(0, 64).toUpperCase() });
}

/** The `/openapi/v3` index. */
export function openApiIndex(): Record<string, unknown> {
  const paths: Record<string, unknown> = {};
  for (const [p, d] of docs) paths[p] = { serverRelativeURL: `/openapi/v3/${p}?hash=${d.hash}` };
  return { paths };
}

/** The v3 document of `api/v1` or `apis/<g>/<v>` (JSON text), or undefined. */
export function openApiDocument(path: string): string | undefined {
  return docs.get(path)?.body;
}
