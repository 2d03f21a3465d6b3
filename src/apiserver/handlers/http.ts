/**
 * HTTP plumbing of the handlers: bounded body reading and decoding (JSON, YAML), content
 * negotiation (Table), and the one error writer that turns anything thrown into a `metav1.Status`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parse as parseYaml } from 'yaml';
import { ApiError, badRequest, errorToStatus } from '../errors.ts';
import type { PatchType } from '../registry/store.ts';
import { goJsonSyntaxError } from './json-syntax.ts';
import { decodeKubernetesProtobuf } from './protobuf.ts';

/** Default limit of a request body: 3 MiB, as Kubernetes' apiserver (etcd's object size limit is 1.5 MiB). */
export const DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024;

/**
 * Reads a whole request body up to `limit` bytes.
 * @throws ApiError RequestEntityTooLarge past the limit (the rest of the body is discarded)
 */
export async function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length'] ?? '0');
  if (declared > limit) {
    req.resume();
    throw new ApiError('RequestEntityTooLarge', `the request body is ${declared} bytes, over the limit of ${limit} bytes`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  // Past the limit the rest is read and dropped (breaking a for-await would reset the connection).
  for await (const c of req) {
    const chunk = c as Buffer;
    size += chunk.length;
    if (size <= limit) chunks.push(chunk);
  }
  if (size > limit) throw new ApiError('RequestEntityTooLarge', `the request body is over the limit of ${limit} bytes`);
  return Buffer.concat(chunks);
}

/** The media type of a request (lower case, no parameters). */
export function mediaType(req: IncomingMessage): string {
  return String(req.headers['content-type'] ?? 'application/json').split(';')[0]!.trim().toLowerCase();
}

/**
 * The deepest nesting of arrays and objects a JSON or YAML body may have. kube-apiserver's decoder (Go's
 * `encoding/json`) stops at 10 000 levels (`exceeded max depth`); here the limit is 1 000, because the
 * registry copies objects with `structuredClone`, which exhausts Node's stack at about 2 000 levels (a
 * 500 `Maximum call stack size exceeded` before). Kubernetes objects nest a few tens of levels.
 */
export const MAX_NESTING_DEPTH = 1000;

/**
 * Whether a JSON (or YAML flow) text nests `[`/`{` deeper than `max` outside strings; one pass, no parse.
 */
export function nestsDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

/**
 * The media types of a body to create or update from, as kube-apiserver's serializers list them (its
 * CBOR, behind a feature gate that is off by default, left out).
 */
export const INPUT_MEDIA_TYPES: readonly string[] = ['application/json', 'application/yaml', 'application/vnd.kubernetes.protobuf'];

/** 415 UnsupportedMediaType as kube-apiserver's `NewUnsupportedMediaTypeError` words it, naming what it takes. */
export function unsupportedMediaType(accepted: readonly string[]): ApiError {
  return new ApiError('UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: ${accepted.join(', ')}`);
}

/**
 * The patch media types kube-apiserver takes on a built-in resource, in the order its 415 lists them
 * (apply-patch+cbor, behind the CBOR feature gate, left out), each with the registry's patch type.
 */
export const PATCH_MEDIA_TYPES: Readonly<Record<string, PatchType>> = {
  'application/json-patch+json': 'json',
  'application/merge-patch+json': 'merge',
  'application/strategic-merge-patch+json': 'strategic',
  'application/apply-patch+yaml': 'apply',
};

/**
 * The patch type of a PATCH request, by its Content-Type (parameters such as `; charset=` ignored).
 * @throws ApiError UnsupportedMediaType naming the patch media types
 */
export function patchTypeOf(req: IncomingMessage): PatchType {
  const type = PATCH_MEDIA_TYPES[mediaType(req)];
  if (!type) throw unsupportedMediaType(Object.keys(PATCH_MEDIA_TYPES));
  return type;
}

/**
 * kube-apiserver's `summarizeData(body, 30)` in a decode error: the text when it opens with `{`, else
 * its bytes in hex; past 30 bytes cut, with ` ...`.
 */
function summarize(buf: Buffer): string {
  if (buf.length === 0) return '<empty>';
  const head = buf.subarray(0, 30);
  const text = buf[0] === 0x7b ? head.toString('utf8') : head.toString('hex');
  return buf.length > 30 ? `${text} ...` : text;
}

/** Options of {@link decodeBody}. */
export interface DecodeOptions {
  /** A PATCH body: its media type was checked against the patch types by the caller. */
  patch?: boolean;
  /**
   * The kind the body is decoded into (`Pod`) on a create or update: a body that is not JSON is then
   * refused as kube-apiserver's `transformDecodeError` words it (`the object provided is unrecognized
   * (must be of type Pod): couldn't get version/kind; json parse error: ... (78797a)`).
   */
  kind?: string;
}

/**
 * Decodes a body as JSON, or YAML when the media type says so (apply-patch+yaml, yaml), or protobuf.
 * @throws ApiError UnsupportedMediaType for a media type other than INPUT_MEDIA_TYPES (but for a PATCH), or for
 *   a protobuf kind not decoded here; BadRequest naming the decode error (JSON's in the words of Go's
 *   encoding/json, as kube-apiserver's), or for a body nested deeper than MAX_NESTING_DEPTH
 */
export function decodeBody(buf: Buffer, type: string, opts: DecodeOptions = {}): unknown {
  if (!opts.patch && !INPUT_MEDIA_TYPES.includes(type)) throw unsupportedMediaType(INPUT_MEDIA_TYPES);
  if (type === 'application/vnd.kubernetes.protobuf') return buf.length === 0 ? undefined : decodeKubernetesProtobuf(buf);
  const text = buf.toString('utf8');
  if (text.trim() === '') return undefined;
  // Quotes in YAML may be single or absent, so the scan is exact for JSON and a bound for YAML's flow style.
  if (nestsDeeperThan(text, MAX_NESTING_DEPTH)) {
    throw badRequest(`the request body nests arrays or objects deeper than ${MAX_NESTING_DEPTH} levels (exceeded max depth): send a shallower object`);
  }
  if (type.endsWith('yaml')) {
    try {
      return parseYaml(text, { uniqueKeys: true, maxAliasCount: 100 });
    } catch (err: unknown) {
      throw badRequest(`error decoding YAML: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
    }
  }
  try {
    return JSON.parse(text);
  } catch (err: unknown) {
    const why = `couldn't get version/kind; json parse error: ${goJsonSyntaxError(buf) ?? (err instanceof Error ? err.message : String(err))}`;
    throw badRequest(opts.kind ? `the object provided is unrecognized (must be of type ${opts.kind}): ${why} (${summarize(buf)})` : why);
  }
}

/** What an empty body was sent for: a create or update decoding into `kind`, or a patch of a type. */
export type EmptyBodyOf = { kind: string } | { patch: PatchType; fieldValidation: string | null };

/**
 * The 400 kube-apiserver answers an empty (or white-space) write body with, word for word:
 * - create or update (`POST`, `PUT`, and their subresources): the decoder finds no kind,
 *   `the object provided is unrecognized (must be of type Pod): couldn't get version/kind; json parse
 *   error: unexpected end of JSON input (<empty>)` (protobuf: `empty data`);
 * - strategic merge patch: `unexpected end of JSON input`;
 * - merge and JSON patch: `error decoding patch: unexpected end of JSON input` under `fieldValidation`
 *   Strict or Warn (Warn when absent, kube's default), else the patch library's `Invalid JSON Patch`
 *   (merge) or `unexpected end of JSON input` (JSON);
 * - apply (server-side apply of an empty YAML, which kube decodes as null and refuses deeper in its field
 *   manager): this server's own words, `error decoding YAML: the body is empty: send the object to apply`.
 */
export function emptyBodyError(buf: Buffer, type: string, of: EmptyBodyOf): ApiError {
  const eof = 'unexpected end of JSON input';
  if ('kind' in of) {
    const why = type === 'application/vnd.kubernetes.protobuf' ? 'empty data' : `couldn't get version/kind; json parse error: ${eof}`;
    return badRequest(`the object provided is unrecognized (must be of type ${of.kind}): ${why} (${summarize(buf)})`);
  }
  const strict = of.fieldValidation === null || of.fieldValidation === 'Strict' || of.fieldValidation === 'Warn';
  switch (of.patch) {
    case 'strategic':
      return badRequest(eof);
    case 'merge':
      return badRequest(strict ? `error decoding patch: ${eof}` : 'Invalid JSON Patch');
    case 'json':
      return badRequest(strict ? `error decoding patch: ${eof}` : eof);
    default:
      return badRequest('error decoding YAML: the body is empty: send the object to apply');
  }
}

/** Whether the client asks for a `meta.k8s.io` Table (`Accept: application/json;as=Table;...`). */
export function wantsTable(req: IncomingMessage): boolean {
  const accept = String(req.headers.accept ?? '');
  return /as=Table/.test(accept) && /g=meta\.k8s\.io/.test(accept);
}

/** Whether the client asks for `PartialObjectMetadata` (`as=PartialObjectMetadata[List]`). */
export function wantsPartial(req: IncomingMessage): boolean {
  return /as=PartialObjectMetadata/.test(String(req.headers.accept ?? ''));
}

/** Writes a JSON answer. */
export function sendJson(res: ServerResponse, code: number, body: unknown, headers: Record<string, string> = {}): void {
  const data = JSON.stringify(body);
  res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data), 'Cache-Control': 'no-cache, private', ...headers });
  res.end(data);
}

/** Writes JSON text made elsewhere (objects copied from the store as text). */
export function sendRawJson(res: ServerResponse, code: number, json: string): void {
  res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(json), 'Cache-Control': 'no-cache, private' });
  res.end(json);
}

/** Writes any thrown value as a `metav1.Status` with its HTTP code. */
export function sendError(res: ServerResponse, err: unknown): number {
  const { status, headers } = errorToStatus(err);
  if (res.headersSent) {
    res.destroy();
    return status.code;
  }
  sendJson(res, status.code, status, headers);
  return status.code;
}

/** A `Warning` header value as Kubernetes writes it (`299 - "text"`). */
export function warningHeader(warnings: string[]): Record<string, string> {
  if (warnings.length === 0) return {};
  return { Warning: warnings.map((w) => `299 - ${JSON.stringify(w)}`).join(', ') };
}
