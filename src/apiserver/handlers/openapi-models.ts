/**
 * OpenAPI v3 schemas of the built-in kinds, generated from `@kubernetes/client-node`'s models (the
 * classes it generates from kube-apiserver's own OpenAPI document): every field of a kind and of
 * every model it reaches, named as kube-apiserver names them (`io.k8s.api.core.v1.PodSpec`,
 * `io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta`), with the descriptions of the models' `.d.ts`
 * comments — what `kubectl explain` prints (kubectl-wire §1.5). The ~220 fields whose description
 * client-node lost (a model, IntOrString or Quantity type) take theirs from openapi-field-docs.json,
 * and a field Kube32 refuses gets Kube32's note first (openapi-notes.ts).
 *
 * Each model class has a static `getAttributeTypeMap()` (`{ name, baseName, type, format }` a
 * field), set as a JSON array in its generated `.js` file; its `.d.ts` file beside it carries the
 * descriptions and which fields are required.
 * Nothing is read until a document is asked for, and then only the models used, one file each
 * (the package's entry point loads all ~900 of them and the HTTP client: over half a second).
 */
import { existsSync, readFileSync } from 'node:fs';
import fieldDocs from './openapi-field-docs.json' with { type: 'json' };
import { KUBE32_NOTES } from './openapi-notes.ts';

/**
 * kube-apiserver's descriptions of the fields client-node's models leave without one (a field whose
 * type is a model, IntOrString or Quantity), by `schema#field`: written by openapi-field-docs-gen.ts.
 */
const FIELD_DOCS: Readonly<Record<string, string>> = fieldDocs;

/** One OpenAPI v3 schema object. */
export type Schema = Record<string, unknown>;

/** One field of a client-node model, as its `getAttributeTypeMap()` lists it. */
interface Attribute {
  name: string;
  baseName: string;
  type: string;
  format: string;
}

const META = 'io.k8s.apimachinery.pkg.apis.meta.v1';
/** apimachinery's meta/v1 types (client-node names them `V1<Name>` like any core type). */
const META_TYPES = new Set([
  'APIGroup', 'APIGroupList', 'APIResource', 'APIResourceList', 'APIVersions', 'Condition', 'DeleteOptions', 'FieldSelectorRequirement',
  'GroupVersionForDiscovery', 'LabelSelector', 'LabelSelectorRequirement', 'ListMeta', 'ManagedFieldsEntry', 'ObjectMeta', 'OwnerReference',
  'Preconditions', 'ServerAddressByClientCIDR', 'Status', 'StatusCause', 'StatusDetails', 'WatchEvent',
]);

/** IntOrString's own description, which client-node's IntOrString fields carry in place of theirs. */
const INT_OR_STRING_DOC =
  'IntOrString is a type that can hold an int32 or a string.  When used in JSON or YAML marshalling and unmarshalling, it produces or consumes the inner type.  This allows you to have, for example, a JSON field that can accept a name or number.';

/** Schemas of the scalar types kube-apiserver names, which client-node keeps as plain strings or Dates. */
const NAMED_SCALARS: Record<string, Schema> = {
  [`${META}.Time`]: {
    type: 'string',
    format: 'date-time',
    description: 'Time is a wrapper around time.Time which supports correct marshaling to YAML and JSON. Wrappers are provided for many of the factory methods that the time package offers.',
  },
  [`${META}.MicroTime`]: { type: 'string', format: 'date-time', description: 'MicroTime is version of Time with microsecond level precision.' },
  'io.k8s.apimachinery.pkg.util.intstr.IntOrString': {
    format: 'int-or-string',
    oneOf: [{ type: 'integer' }, { type: 'string' }],
    description: INT_OR_STRING_DOC,
  },
  'io.k8s.apimachinery.pkg.api.resource.Quantity': {
    oneOf: [{ type: 'string' }, { type: 'number' }],
    description:
      'Quantity is a fixed-point representation of a number. It provides convenient marshaling/unmarshaling in JSON and YAML, in addition to String() and AsInt64() accessors. The serialization format is: <quantity> ::= <signedNumber><suffix> (Note that <suffix> may be empty, from the "" case in <decimalSI>.) <suffix> ::= <binarySI> | <decimalExponent> | <decimalSI>; <binarySI> ::= Ki | Mi | Gi | Ti | Pi | Ei; <decimalSI> ::= m | "" | k | M | G | T | P | E. Examples: 100m (0.1), 128Mi, 2Gi.',
  },
};

/**
 * The fields whose values are resource.Quantity, which client-node types as plain strings (so its
 * models cannot tell): by model, the fields (maps of quantities or one quantity).
 */
const QUANTITY_FIELDS: Record<string, readonly string[]> = {
  V1ResourceRequirements: ['limits', 'requests'],
  V1VolumeResourceRequirements: ['limits', 'requests'],
  V1NodeStatus: ['allocatable', 'capacity'],
  V1ContainerStatus: ['allocatedResources'],
  V1PersistentVolumeSpec: ['capacity'],
  V1PersistentVolumeClaimStatus: ['allocatedResources', 'capacity'],
  V1ResourceQuotaSpec: ['hard'],
  V1ResourceQuotaStatus: ['hard', 'used'],
  V1LimitRangeItem: ['default', 'defaultRequest', 'max', 'maxLimitRequestRatio', 'min'],
  V1EmptyDirVolumeSource: ['sizeLimit'],
  V1PodSpec: ['overhead'],
  V1Overhead: ['podFixed'],
};

/** A string field's type with its strings read as quantities. */
const quantityOf = (type: string): string => (type === 'string' ? 'Quantity' : type.replace(/:\s*string;?\s*\}$/, ': Quantity; }'));

const modelsDir = new URL('./gen/models/', import.meta.resolve('@kubernetes/client-node'));
const apisDir = new URL('./gen/apis/', import.meta.resolve('@kubernetes/client-node'));

const attributeMaps = new Map<string, Attribute[] | null>();

/**
 * The fields of model `name` (`V1PodSpec`): the `attributeTypeMap` its generated `.js` file sets (a
 * JSON array), read from that one file on first use; undefined when client-node has no such model.
 */
function attributesOf(name: string): Attribute[] | undefined {
  let attrs = attributeMaps.get(name);
  if (attrs === undefined) {
    attrs = null;
    const file = new URL(`${name}.js`, modelsDir);
    if (/^[A-Z][A-Za-z0-9]*$/.test(name) && existsSync(file)) {
      const m = new RegExp(`^${name}\\.attributeTypeMap = (\\[[\\s\\S]*?\\n\\]);`, 'm').exec(readFileSync(file, 'utf8'));
      if (m?.[1]) attrs = JSON.parse(m[1]) as Attribute[];
    }
    attributeMaps.set(name, attrs);
  }
  return attrs ?? undefined;
}

const cap = (s: string): string => s.charAt(0).toUpperCase() + s.slice(1);
/** `apps` → `apps`, `coordination.k8s.io` → `coordination`, `` → `core`: the package of `io.k8s.api.<package>.<version>`. */
const groupPackage = (group: string): string => (group === '' ? 'core' : (group.split('.')[0] ?? group));

/**
 * The client-node model class of a served kind: `CoreV1Event` or `EventsV1Event` where the name is
 * shared between groups, else `V1Pod`, `V1Deployment`, ...; undefined when client-node has none.
 */
export function modelClassOf(group: string, version: string, kind: string): string | undefined {
  for (const name of [`${cap(groupPackage(group))}${cap(version)}${kind}`, `${cap(version)}${kind}`]) if (attributesOf(name)) return name;
  return undefined;
}

/** Every model a model reaches through its fields, itself included. */
function reach(root: string, into: Set<string>): Set<string> {
  const todo = [root];
  while (todo.length > 0) {
    const name = todo.pop() as string;
    if (into.has(name)) continue;
    const attrs = attributesOf(name);
    if (!attrs) continue;
    into.add(name);
    for (const a of attrs) for (const m of a.type.matchAll(/[A-Za-z0-9]+/g)) if (attributesOf(m[0])) todo.push(m[0]);
  }
  return into;
}

let coreModels: Set<string> | undefined;
/** The models of the core group: those CoreV1Api's operations use and all they reach. */
function core(): Set<string> {
  if (!coreModels) {
    coreModels = new Set();
    const text = readFileSync(new URL('CoreV1Api.d.ts', apisDir), 'utf8');
    for (const m of text.matchAll(/from '\.\.\/models\/([A-Za-z0-9]+)\.js'/g)) if (m[1]) reach(m[1], coreModels);
  }
  return coreModels;
}

/**
 * kube-apiserver's schema name of a client-node model, for a document of `group`/`version`:
 * `V1ObjectMeta` → `io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta`, `V1PodSpec` →
 * `io.k8s.api.core.v1.PodSpec`, `EventsV1Event` → `io.k8s.api.events.v1.Event`, and a model
 * found only under the document's kinds (`V1DeploymentSpec`) → `io.k8s.api.apps.v1.DeploymentSpec`.
 */
function schemaNameOf(model: string, group: string): string {
  const m = /^([A-Z][a-z]+)?(V\d+(?:(?:alpha|beta)\d+)?)(.+)$/.exec(model);
  if (!m) return model;
  const [, prefix, ver, type] = m as unknown as [string, string | undefined, string, string];
  const version = ver.toLowerCase();
  if (prefix) return `io.k8s.api.${prefix.toLowerCase()}.${version}.${type}`;
  if (META_TYPES.has(type)) return `${META}.${type}`;
  return `io.k8s.api.${group === '' || core().has(model) ? 'core' : groupPackage(group)}.${version}.${type}`;
}

interface Docs {
  description?: string;
  fields: Map<string, { description?: string; required: boolean }>;
}

/** A model's descriptions and required fields, from the comments and `?`s of its `.d.ts` file. */
function readDocs(model: string): Docs {
  const docs: Docs = { fields: new Map() };
  let text: string;
  try {
    text = readFileSync(new URL(`${model}.d.ts`, modelsDir), 'utf8');
  } catch {
    return docs;
  }
  for (const { line: t, comment } of documentedLines(text)) {
    const field = /^'([^']+)'(\?)?:/.exec(t);
    if (field?.[1]) docs.fields.set(field[1], { description: comment && unescapeDoc(comment), required: !field[2] });
    else if (t.startsWith('export declare class') && comment) docs.description = unescapeDoc(comment);
  }
  return docs;
}

/**
 * The code lines of a declaration file (`.d.ts`), trimmed, each with the text of the JSDoc comment
 * just before it (its lines without their `* `, joined by `joiner`; undefined when none). Blank
 * lines are skipped; a comment belongs to the next code line only. Used here and by the generator
 * of the field descriptions table (openapi-field-docs-gen.ts), which reads another package's.
 */
export function* documentedLines(text: string, joiner = ' '): Generator<{ line: string; comment: string | undefined }> {
  let comment: string[] | undefined;
  let pending: string | undefined;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (comment) {
      if (line.startsWith('*/')) {
        pending = comment.join(joiner).trim();
        comment = undefined;
      } else comment.push(line.replace(/^\* ?/, ''));
      continue;
    }
    if (line.startsWith('/**')) {
      comment = [];
      continue;
    }
    if (line === '') continue;
    yield { line, comment: pending };
    pending = undefined;
  }
}

/** The generator's escapes (`\"`, `\'`) undone. */
const unescapeDoc = (s: string): string => s.replace(/\\(["'\\])/g, '$1');

/**
 * Adds to `schemas` the schema of a kind's model and of every model it reaches (and the named
 * scalars they use), for the document of `group`/`version`; answers the kind's schema name, or
 * undefined when client-node has no model of it. Reads each new model's `.d.ts` once.
 */
export function addKindSchemas(schemas: Record<string, Schema>, group: string, version: string, kind: string): string | undefined {
  const root = modelClassOf(group, version, kind);
  if (!root) return undefined;
  addModels(schemas, root, group, { group, version, kind });
  return schemaNameOf(root, group);
}

/**
 * The fields (`io.k8s.api.core.v1.Container#resources`) of a kind and of every model it reaches
 * that client-node's models leave without a description of their own — those whose type is a model,
 * IntOrString or Quantity (its generator drops the description of a `$ref` property, or puts the
 * type's in its place) — and so need one from FIELD_DOCS; for openapi-field-docs-gen.ts, which
 * writes that table. Empty when client-node has no model of the kind.
 */
export function fieldsWithoutDocs(group: string, version: string, kind: string): string[] {
  const root = modelClassOf(group, version, kind);
  const out: string[] = [];
  if (!root) return out;
  for (const model of reach(root, new Set())) {
    const name = schemaNameOf(model, group);
    const docs = readDocs(model);
    for (const a of attributesOf(model) as Attribute[]) if (ownDoc(docs.fields.get(a.name)?.description, a.type) === undefined) out.push(`${name}#${a.baseName}`);
  }
  return out.sort();
}

/**
 * A field's description from client-node's `.d.ts`, unless it is its type's description (which
 * client-node puts on IntOrString fields, and which kubectl prints anyway after the field's own).
 */
function ownDoc(description: string | undefined, type: string): string | undefined {
  if (description === undefined || description === '') return undefined;
  if (type.trim() === 'IntOrString' && description === INT_OR_STRING_DOC) return undefined;
  return description;
}

/**
 * Adds to `schemas` `io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta` and the schemas it reaches,
 * for a document of kinds described by hand (Kube32's own).
 */
export function addObjectMetaSchemas(schemas: Record<string, Schema>): void {
  addModels(schemas, 'V1ObjectMeta', '');
}

/** Adds the schemas of `root` and every model it reaches; the root is a kind when `gvk` is given. */
function addModels(schemas: Record<string, Schema>, root: string, group: string, gvk?: { group: string; version: string; kind: string }): void {
  const reached = [...reach(root, new Set())].sort();
  for (const model of reached) {
    const name = schemaNameOf(model, group);
    if (schemas[name]) continue;
    const docs = readDocs(model);
    const properties: Record<string, Schema> = {};
    const required: string[] = [];
    for (const a of attributesOf(model) as Attribute[]) {
      const d = docs.fields.get(a.name);
      const type = QUANTITY_FIELDS[model]?.includes(a.name) ? quantityOf(a.type) : a.type;
      // kube-apiserver describes every field, a model-typed one too (beside its allOf $ref): where
      // client-node's model has lost that description, it comes from FIELD_DOCS.
      const key = `${name}#${a.baseName}`;
      const own = ownDoc(d?.description, a.type) ?? FIELD_DOCS[key];
      // What Kube32 does differently (a field it refuses), first: see openapi-notes.ts.
      const note = KUBE32_NOTES[key];
      const description = note && own ? `${note}\n\n${own}` : (note ?? own);
      properties[a.baseName] = fieldSchema(type, a.format, group, schemas, description);
      if (d?.required) required.push(a.baseName);
    }
    const s: Schema = { type: 'object' };
    if (docs.description) s.description = docs.description;
    s.properties = properties;
    if (required.length > 0) s.required = required;
    if (model === root && gvk) s['x-kubernetes-group-version-kind'] = [gvk];
    schemas[name] = s;
  }
}

const ref = (name: string): Schema => ({ $ref: `#/components/schemas/${name}` });

/** The schema of one field of client-node type `type` (format `format`), adding the named scalars it uses. */
function fieldSchema(type: string, format: string, group: string, schemas: Record<string, Schema>, description?: string): Schema {
  const s = typeSchema(type.trim(), format, group, schemas);
  return description ? { description, ...s } : s;
}

function typeSchema(type: string, format: string, group: string, schemas: Record<string, Schema>): Schema {
  const named = (name: string): Schema => {
    schemas[name] ??= NAMED_SCALARS[name] as Schema;
    return { allOf: [ref(name)] };
  };
  const array = /^Array<(.+)>$/.exec(type);
  if (array?.[1]) return { type: 'array', items: typeSchema(array[1].trim(), format, group, schemas) };
  const map = /^\{\s*\[key: string\]:\s*(.+?);?\s*\}$/.exec(type);
  if (map?.[1]) return { type: 'object', additionalProperties: typeSchema(map[1].trim(), format, group, schemas) };
  switch (type) {
    case 'string':
      return format ? { type: 'string', format } : { type: 'string' };
    case 'number':
      return format === 'int32' || format === 'int64' ? { type: 'integer', format } : format ? { type: 'number', format } : { type: 'number' };
    case 'boolean':
      return { type: 'boolean' };
    case 'Date':
      return named(`${META}.Time`);
    case 'V1MicroTime':
      return named(`${META}.MicroTime`);
    case 'IntOrString':
      return named('io.k8s.apimachinery.pkg.util.intstr.IntOrString');
    case 'Quantity':
      return named('io.k8s.apimachinery.pkg.api.resource.Quantity');
    case 'any':
    case 'object':
      return { type: 'object' };
  }
  if (attributesOf(type)) return { allOf: [ref(schemaNameOf(type, group))] };
  return { type: 'object' };
}
