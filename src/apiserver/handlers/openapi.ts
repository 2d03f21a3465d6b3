/**
 * OpenAPI v3 (`/openapi/v3` and one document per group-version): every kind's PATCH operation
 * lists `fieldValidation`, so kubectl leaves validation to the server (kubectl-wire §1.5), and
 * `components.schemas` describe each kind in full for `kubectl explain`: the Checkpoint and Module
 * here, the built-in kinds (and every type they reach) from `@kubernetes/client-node`'s models
 * (openapi-models.ts). Documents are built on their first request, not at start, and kept.
 * `/openapi/v2` is an empty document (non-resource.ts says why).
 */
import { createHash } from 'node:crypto';
import { RESOURCES, groupVersions } from '../registry/catalog.ts';
import type { ResourceDef } from '../registry/types.ts';
import { addKindSchemas, addObjectMetaSchemas, type Schema } from './openapi-models.ts';

/** Kube32's own group: its kinds are described here, the others from client-node's models. */
const KUBE32_GROUP = 'kube32.io';

const str = (description: string): Schema => ({ type: 'string', description });
const int = (description: string): Schema => ({ type: 'integer', format: 'int64', description });
const obj = (description: string, properties?: Record<string, Schema>, required?: string[]): Schema => {
  const s: Schema = { type: 'object', description };
  if (properties) s.properties = properties;
  if (required) s.required = required;
  return s;
};

const OBJECT_META_REF = '#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta';
const CHECKPOINT_SCHEMA = {
  spec: obj(
    'What to save or move.',
    {
      podName: str('The pod, required.'),
      containerName: str('Its container. Default: the only container.'),
      action: str('Save (the default) or Move.'),
      target: obj('For Move: nodeName or nodeSelector (not both: 422 Invalid); none: the scheduler picks.', {
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

/** One group-version's document: its JSON text and the hash the index names it by. */
interface Document {
  body: string;
  hash: string;
}

/** The documents built so far, by path: each is built on its first request, none at start. */
const built = new Map<string, Document>();

/** The group-versions served, by document path (`api/v1`, `apis/apps/v1`). */
function servedPaths(): Map<string, { group: string; version: string }> {
  const out = new Map<string, { group: string; version: string }>();
  for (const gv of groupVersions()) out.set(gvPath(gv.group, gv.version), gv);
  return out;
}

/** Builds one group-version's document (kinds' schemas from client-node's models, see openapi-models.ts). */
function buildDocument(group: string, version: string): Document {
  const defs = RESOURCES.filter((r) => r.group === group && r.version === version);
  const paths: Record<string, unknown> = {};
  const schemas: Record<string, Schema> = {};
  for (const def of defs) {
    const base = `/${gvPath(group, version)}${def.namespaced ? '/namespaces/{namespace}' : ''}/${def.plural}/{name}`;
    const gvk = { group, version, kind: def.kind };
    const params = [
      { name: 'dryRun', in: 'query', schema: { type: 'string', uniqueItems: true } },
      { name: 'fieldManager', in: 'query', schema: { type: 'string', uniqueItems: true } },
      { name: 'fieldValidation', in: 'query', schema: { type: 'string', uniqueItems: true } },
    ];
    let name = group === KUBE32_GROUP ? undefined : addKindSchemas(schemas, group, version, def.kind);
    if (!name) {
      // Checkpoint and Module (and any kind client-node has no model of): described here.
      name = schemaName(def);
      schemas[name] = kindSchema(def);
      addObjectMetaSchemas(schemas);
    }
    const ref = { $ref: `#/components/schemas/${name}` };
    // PATCH names no requestBody (no strategic-merge-patch content): kubectl apply and edit then build
    // their strategic merge patches from kubectl's own types, since these schemas carry no patch merge keys.
    paths[base] = {
      get: { operationId: `read${def.kind}`, 'x-kubernetes-action': 'get', 'x-kubernetes-group-version-kind': gvk, responses: { '200': { content: { 'application/json': { schema: ref } } } } },
      put: { operationId: `replace${def.kind}`, 'x-kubernetes-action': 'put', 'x-kubernetes-group-version-kind': gvk, parameters: params, requestBody: { content: { '*/*': { schema: ref } } } },
      patch: { operationId: `patch${def.kind}`, 'x-kubernetes-action': 'patch', 'x-kubernetes-group-version-kind': gvk, parameters: [...params, { name: 'force', in: 'query', schema: { type: 'boolean' } }] },
      delete: { operationId: `delete${def.kind}`, 'x-kubernetes-action': 'delete', 'x-kubernetes-group-version-kind': gvk },
    };
  }
  const sorted: Record<string, Schema> = {};
  for (const k of Object.keys(schemas).sort()) sorted[k] = schemas[k] as Schema;
  const doc = { openapi: '3.0.0', info: { title: 'Kubernetes', version: 'v1.32.0-kube32' }, paths, components: { schemas: sorted } };
  const body = JSON.stringify(doc);
  return { body, hash: createHash('sha512').update(body).digest('hex').slice(0, 64).toUpperCase() };
}

/** The document at `path`, built and kept on its first request; undefined when no such group-version is served. */
function documentAt(path: string): Document | undefined {
  const d = built.get(path);
  if (d) return d;
  const gv = servedPaths().get(path);
  if (!gv) return undefined;
  const doc = buildDocument(gv.group, gv.version);
  built.set(path, doc);
  return doc;
}

/**
 * The `/openapi/v3` index: each group-version's document by `serverRelativeURL`, whose `hash` is
 * the SHA-512 of the document's text (so kubectl may cache it for good). The first call builds
 * every document (kept for later calls); the API server builds none at start.
 */
export function openApiIndex(): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const p of servedPaths().keys()) out[p] = { serverRelativeURL: `/openapi/v3/${p}?hash=${(documentAt(p) as Document).hash}` };
  return { paths: out };
}

/**
 * The v3 document of `api/v1` or `apis/<g>/<v>` (JSON text), or undefined when no such
 * group-version is served. Built on its first request and kept.
 */
export function openApiDocument(path: string): string | undefined {
  return documentAt(path)?.body;
}
