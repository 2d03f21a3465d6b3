/**
 * A Module's bytes (`/apis/kube32.io/v1/modules/<name>/data`): GET answers them; PUT checks that
 * they are a module a pod can run (`validateModuleBytes`: parse, `WebAssembly.validate`, k32
 * imports, ABI exports), stores them content-addressed and creates or updates the Module. Bytes
 * that do not load answer 422 Invalid with the runtime's reason, and nothing is stored.
 */
import { createHash } from 'node:crypto';
import { ApiError, badRequest } from '../errors.ts';
import { modules } from '../registry/modules/index.ts';
import { validateModuleBytes } from '../registry/modules/validate.ts';
import { rec } from '../registry/util.ts';
import type { RequestScope } from './context.ts';
import { mediaType, sendJson } from './http.ts';

function invalid(name: string, reason: string): ApiError {
  return new ApiError('Invalid', `Module.kube32.io "${name}" is invalid: data: ${reason}`, {
    name,
    group: 'kube32.io',
    kind: 'Module',
    causes: [{ reason: 'FieldValueInvalid', message: reason, field: 'data' }],
  });
}

/**
 * Serves GET and PUT of a Module's bytes (PUT creates or updates the Module: 201 or 200).
 * @throws ApiError NotFound (no Module, or no bytes), UnsupportedMediaType (PUT not
 *   application/octet-stream), BadRequest (no Content-Length, or a body of another length),
 *   RequestEntityTooLarge (over `ctx.maxModuleBytes`), Invalid (bytes a pod cannot run),
 *   MethodNotAllowed
 */
export async function serveModuleData(scope: RequestScope): Promise<void> {
  const { req, res, ctx, info } = scope;
  const reg = ctx.registry;
  const name = info.name!;
  if (req.method === 'GET') {
    const mod = await reg.get(modules, '', name);
    const sha = String(rec(mod.spec).sha256);
    const bytes = await reg.storage.getBlob(sha);
    if (!bytes) throw new ApiError('NotFound', `modules.kube32.io "${name}" has no data`, { name, group: 'kube32.io', kind: 'modules' });
    res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': bytes.byteLength, 'Cache-Control': 'no-cache, private', 'X-Kube32-Image-Sha256': sha });
    res.end(bytes);
    return;
  }
  if (req.method !== 'PUT') throw new ApiError('MethodNotAllowed', `${req.method} is not supported on modules/data`);
  const type = mediaType(req);
  if (type !== 'application/octet-stream') throw new ApiError('UnsupportedMediaType', `the data must be sent as application/octet-stream, not ${type}`);
  const len = req.headers['content-length'];
  if (len === undefined || !/^\d+$/.test(len)) throw badRequest('the data must be sent with a Content-Length');
  const length = Number(len);
  if (length > ctx.maxModuleBytes) {
    req.resume();
    throw new ApiError('RequestEntityTooLarge', `the module is ${length} bytes, over the limit of ${ctx.maxModuleBytes} bytes`);
  }
  const buf = Buffer.allocUnsafe(length);
  const hash = createHash('sha256');
  let off = 0;
  let tooLong = false;
  for await (const c of req) {
    const chunk = c as Buffer;
    if (tooLong || off + chunk.length > length) {
      tooLong = true;
      continue;
    }
    chunk.copy(buf, off);
    hash.update(chunk);
    off += chunk.length;
  }
  if (tooLong) throw badRequest('the body is longer than its Content-Length');
  if (off !== length) throw badRequest(`the body ended after ${off} of ${length} bytes`);
  if (length < 8 || buf.readUInt32BE(0) !== 0x0061736d) throw invalid(name, 'not a WebAssembly module (no \\0asm magic)');
  await validateModuleBytes(name, buf);
  const sha256 = hash.digest('hex');
  const result = await reg.storage.transaction(async () => {
    await reg.storage.putBlob(sha256, buf);
    const existing = await reg.find(modules, '', name);
    if (!existing) return { obj: await reg.create(modules, '', { metadata: { name }, spec: { sha256, sizeBytes: length } }), created: true };
    return { obj: await reg.serverUpdate(modules, '', name, (o) => ({ ...o, spec: { ...rec(o.spec), sha256, sizeBytes: length } })), created: false };
  });
  sendJson(res, result.created ? 201 : 200, result.obj);
}
