/**
 * The node's module cache: pod images fetched by digest from the control plane's module store
 * (`GET /apis/kube32.io/v1/blobs/<sha256 hex>`), kept on disk under `<data-dir>/modules/<hex>.wasm`,
 * and checked against their digest both when fetched and when read back from disk.
 */
import { createHash } from 'node:crypto';
import { mkdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { isBareModuleImage, writeFileAtomic, type Logger } from '../lib/index.ts';
import { ANNOTATIONS, DIGEST_IMAGE_PREFIX, readText } from '../api/index.ts';
import { type ControlPlane, errorMessage, isApiError } from './client.ts';
import { loadModule, type PodModule } from '../wasm/index.ts';

/** The pod annotation with the image digest, set by the API server when the pod is created. */
export const IMAGE_SHA256_ANNOTATION = ANNOTATIONS.imageSha256;
/** The image form that carries its digest: `kube32.io/wasm-sha256:<64 hex digits>`. */
export { DIGEST_IMAGE_PREFIX };
/** The largest module the node fetches: 64 MiB. */
export const MAX_MODULE_BYTES = 64 * 1024 * 1024;

const HEX64 = /^[0-9a-f]{64}$/;

/** Why an image cannot be pulled: `InvalidImageName` (no digest to fetch) or `ErrImagePull`. */
export class ImagePullError extends Error {
  readonly reason: 'InvalidImageName' | 'ErrImagePull';
  constructor(reason: 'InvalidImageName' | 'ErrImagePull', message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'ImagePullError';
    this.reason = reason;
  }
}

/**
 * The digest of a container's image: the image's own (`kube32.io/wasm-sha256:<hex>`), else the
 * pod's `kube32.io/image-sha256` annotation (which the API server sets for `wasm://NAME`).
 * @returns 64 lower-case hex digits
 * @throws ImagePullError `InvalidImageName` when neither gives a digest
 */
export function imageDigest(pod: V1Pod, image: string): string {
  if (image.startsWith(DIGEST_IMAGE_PREFIX)) {
    const hex = image.slice(DIGEST_IMAGE_PREFIX.length).toLowerCase();
    if (!HEX64.test(hex)) throw new ImagePullError('InvalidImageName', `image "${image}": the digest must be 64 hex digits`);
    return hex;
  }
  const ann = pod.metadata?.annotations?.[IMAGE_SHA256_ANNOTATION]?.toLowerCase();
  if (ann && HEX64.test(ann)) return ann;
  throw new ImagePullError('InvalidImageName', `image "${image}" has no digest: expected wasm://NAME or the NAME of a pushed module (kube32-cli push), resolved by the API server (annotation ${IMAGE_SHA256_ANNOTATION}), or ${DIGEST_IMAGE_PREFIX}<64 hex digits>`);
}


/**
 * The digest of a container's image as {@link imageDigest} finds it, or else, for a bare module name
 * the API server did not resolve at create (no module had that name then), the digest of the Module
 * of that name now: a pod whose module is pushed after it was created starts once it is there, as a
 * kubelet's pull is retried until the image exists.
 * @returns 64 lower-case hex digits
 * @throws ImagePullError `ErrImagePull` (retried with back-off) when no Module has that name yet;
 *   `InvalidImageName` for an image that can name no module
 */
export async function resolveImageDigest(cp: ControlPlane, pod: V1Pod, image: string): Promise<string> {
  try {
    return imageDigest(pod, image);
  } catch (err: unknown) {
    if (!isBareModuleImage(image)) throw err;
  }
  let mod: { spec?: { sha256?: string } } | undefined;
  try {
    mod = await cp.json<{ spec?: { sha256?: string } }>('GET', `/apis/kube32.io/v1/modules/${image}`);
  } catch (err: unknown) {
    if (!isApiError(err, 404)) throw new ImagePullError('ErrImagePull', `image "${image}": cannot look up module "${image}": ${errorMessage(err)}`, { cause: err });
  }
  const hex = mod?.spec?.sha256?.toLowerCase();
  if (!hex || !HEX64.test(hex)) throw new ImagePullError('ErrImagePull', `image "${image}": no module "${image}" is stored: push it with kube32-cli push FILE.wasm --name ${image}`);
  return hex;
}

/** Fetches and caches module bytes by digest. Concurrent requests for one digest share one fetch. */
export class ModuleCache {
  readonly dir: string;
  readonly #cp: ControlPlane;
  readonly #log: Logger;
  readonly #inflight = new Map<string, Promise<Uint8Array>>();

  constructor(cp: ControlPlane, dataDir: string, log: Logger) {
    this.#cp = cp;
    this.dir = join(dataDir, 'modules');
    this.#log = log;
  }

  /**
   * The module's bytes, from disk when cached (and intact), else from the control plane.
   * @param digest 64 lower-case hex digits
   * @throws ImagePullError `ErrImagePull` when the store does not have it or the bytes do not match
   */
  get(digest: string): Promise<Uint8Array> {
    let p = this.#inflight.get(digest);
    if (!p) {
      p = this.#load(digest).finally(() => this.#inflight.delete(digest));
      this.#inflight.set(digest, p);
    }
    return p;
  }

  async #load(digest: string): Promise<Uint8Array> {
    const path = join(this.dir, `${digest}.wasm`);
    try {
      const bytes = new Uint8Array(await readFile(path));
      if (sha256Hex(bytes) === digest) return bytes;
      this.#log.warn({ digest, path }, 'cached module does not match its digest: fetching it again');
      await rm(path, { force: true });
    } catch (err: unknown) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    let res: Awaited<ReturnType<ControlPlane['request']>>;
    try {
      res = await this.#cp.request('GET', `/apis/kube32.io/v1/blobs/${digest}`);
    } catch (err: unknown) {
      throw new ImagePullError('ErrImagePull', `module sha256:${digest}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
    if (res.status !== 200) {
      const text = await readText(res.body);
      let msg = text.slice(0, 300);
      try {
        msg = (JSON.parse(text) as { message?: string }).message ?? msg;
      } catch {}
      throw new ImagePullError('ErrImagePull', `module sha256:${digest}: the control plane answered ${res.status}: ${msg}`);
    }
    const declared = Number(res.headers['content-length'] ?? 0);
    if (declared > MAX_MODULE_BYTES) {
      res.body.destroy();
      throw new ImagePullError('ErrImagePull', `module sha256:${digest}: ${declared} bytes is over the node's limit of ${MAX_MODULE_BYTES}`);
    }
    const chunks: Uint8Array[] = [];
    let total = 0;
    for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
      total += chunk.byteLength;
      if (total > MAX_MODULE_BYTES) throw new ImagePullError('ErrImagePull', `module sha256:${digest}: over the node's limit of ${MAX_MODULE_BYTES} bytes`);
      chunks.push(chunk);
    }
    const bytes = new Uint8Array(Buffer.concat(chunks));
    const got = sha256Hex(bytes);
    if (got !== digest) throw new ImagePullError('ErrImagePull', `module sha256:${digest}: the bytes received have the digest ${got}`);
    await mkdir(this.dir, { recursive: true });
    await writeFileAtomic(path, bytes);
    this.#log.info({ digest, bytes: bytes.byteLength }, 'module fetched');
    return bytes;
  }
}

/** SHA-256 of bytes, 64 lower-case hex digits. */
export function sha256Hex(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/**
 * Loaded (checked, instrumented, compiled) modules, shared by the pods of one digest and memory
 * limit. A refused module stays refused for that digest and limit.
 */
export class LoadedModules {
  readonly #modules: ModuleCache;
  readonly #loaded = new Map<string, Promise<PodModule>>();
  constructor(modules: ModuleCache) {
    this.#modules = modules;
  }
  /** Whether the module of `digest` is loaded (or loading) for `memoryLimitBytes` on this node. */
  has(digest: string, memoryLimitBytes: number): boolean {
    return this.#loaded.has(`${digest}/${memoryLimitBytes}`);
  }

  /**
   * The module of `digest` loaded for `memoryLimitBytes`.
   * @throws ImagePullError when the bytes cannot be had; ModuleError when the module cannot run as a pod
   */
  get(digest: string, memoryLimitBytes: number): Promise<PodModule> {
    const key = `${digest}/${memoryLimitBytes}`;
    let p = this.#loaded.get(key);
    if (!p) {
      p = this.#modules.get(digest).then((bytes) => loadModule(bytes, { memoryLimitBytes }));
      // A failed fetch is retried on the next call; a refused module is not.
      p.catch((err: unknown) => {
        if (err instanceof ImagePullError) this.#loaded.delete(key);
      });
      this.#loaded.set(key, p);
    }
    return p;
  }
}
