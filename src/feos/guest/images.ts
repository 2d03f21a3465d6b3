/**
 * The guest's image store (seed 000, "A pod": the guest pulls its containers' images): an OCI registry
 * client (the distribution HTTP API v2: a manifest or an index whose linux/amd64 manifest is taken,
 * the config and the layers, each verified by its digest; gzip, zstd and plain tar layers; anonymous
 * pulls with the registry's token dance and pulls with a Bearer pull token) and the store on the pod's
 * disk, `<root>/<manifest hex>/{rootfs,config.json,manifest.json}` with `<root>/refs/<ref hash>`, that
 * the pod's containers share (each container is an overlay on its image's rootfs).
 *
 * A pull of an image whose pull is in flight joins that pull, and takes no token of its own.
 * The pull token is never printed, logged nor written: errors name the registry's answer only.
 *
 * Self-contained (node: only), as the guest carries it.
 */
import { createHash } from 'node:crypto';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { promisify } from 'node:util';
import zlib from 'node:zlib';

const run = promisify(execFile);

/** A parsed image reference: `registry/repository[:tag][@digest]`. */
export interface ImageRef {
  /** The registry's host[:port], as the reference names it ("docker.io" for Docker Hub). */
  registry: string;
  repository: string;
  tag: string;
  digest: string;
}

/** The image's config (the parts a container takes), from the image config's `config`. */
export interface ImageConfig {
  entrypoint: string[];
  cmd: string[];
  env: string[];
  workingDir: string;
  user: string;
}

/** A pulled image in the store. */
export interface StoredImage {
  /** The linux/amd64 manifest's digest, "sha256:<hex>". */
  digest: string;
  /** The unpacked root file system (read-only to containers: the lower layer of their overlays). */
  rootfs: string;
  config: ImageConfig;
  /** The layers' compressed size, bytes. */
  sizeBytes: number;
}

/** What a pull may use. */
export interface PullOptions {
  /** A Bearer token of the registry for this pull alone. */
  token?: string;
  /** Registry host → the `http://host:port` the guest reaches it at. */
  endpoints?: Readonly<Record<string, string>>;
}

/** How many times a layer's download is tried. */
const LAYER_TRIES = 3;

/** A layer's transfer that failed on the way (tried again). */
class LayerTransferError extends Error {}

/** A failed pull: the step and the registry's answer; never the token. */
export class PullError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PullError';
  }
}

const REPO_RE = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$/;
const TAG_RE = /^[\w][\w.-]{0,127}$/;
const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;

/**
 * Parses an image reference the way Docker does: a first component with a `.` or `:` or `localhost` is
 * the registry, else Docker Hub (`library/` added to one-component names); no tag and no digest is
 * `latest`.
 * @throws PullError on a malformed reference
 */
export function parseImageRef(ref: string): ImageRef {
  let registry = 'docker.io';
  let rest = ref;
  const slash = ref.indexOf('/');
  if (slash > 0) {
    const first = ref.slice(0, slash);
    if (first.includes('.') || first.includes(':') || first === 'localhost' || first.startsWith('[')) {
      registry = first;
      rest = ref.slice(slash + 1);
    }
  }
  const bad = () => new PullError(`image ${JSON.stringify(ref)}: not a reference registry/repository[:tag][@digest]`);
  let digest = '';
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST_RE.test(digest)) throw bad();
  }
  let tag = '';
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG_RE.test(tag)) throw bad();
  }
  if (!REPO_RE.test(rest)) throw bad();
  let repository = rest;
  if (registry === 'docker.io' && !repository.includes('/')) repository = `library/${repository}`;
  return { registry, repository, tag: tag || (digest ? '' : 'latest'), digest };
}

const MANIFEST_TYPES = [
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.docker.distribution.manifest.v2+json',
].join(', ');

/** A registry session: the base URL and the Authorization header that works. */
class Registry {
  readonly base: string;
  readonly #ref: ImageRef;
  readonly #token: string | undefined;
  #auth: string | undefined;

  constructor(ref: ImageRef, opts: PullOptions) {
    this.#ref = ref;
    this.#token = opts.token || undefined;
    this.#auth = this.#token ? `Bearer ${this.#token}` : undefined;
    const ep = opts.endpoints?.[ref.registry];
    if (ep) this.base = ep.replace(/\/+$/, '');
    else if (ref.registry === 'docker.io') this.base = 'https://registry-1.docker.io';
    else if (/^(localhost|127\.|\[::1\])/.test(ref.registry)) this.base = `http://${ref.registry}`;
    else this.base = `https://${ref.registry}`;
  }

  /** GETs a registry path; on 401 without a pull token, does the token dance once (anonymous). */
  async get(path: string, accept?: string): Promise<Response> {
    const url = `${this.base}/v2/${this.#ref.repository}/${path}`;
    const headers: Record<string, string> = {};
    if (accept) headers.accept = accept;
    let res = await this.#fetch(url, headers);
    if (res.status === 401 && !this.#token) {
      const challenge = res.headers.get('www-authenticate') ?? '';
      await res.body?.cancel();
      this.#auth = await this.#anonymousToken(challenge);
      res = await this.#fetch(url, headers);
    }
    if (res.status === 401 || res.status === 403) {
      await res.body?.cancel();
      throw new PullError(
        `${this.#ref.registry}/${this.#ref.repository}: the registry refused the pull (HTTP ${res.status}${this.#token ? ': the pull token was not accepted' : ': it needs a pull token'})`,
      );
    }
    if (!res.ok) {
      await res.body?.cancel();
      // A manifest the registry does not have is an image that is not there: say so, as docker pull does.
      const tagOrDigest = path.slice('manifests/'.length);
      const image = `${this.#ref.registry}/${this.#ref.repository}${tagOrDigest.startsWith('sha256:') ? '@' : ':'}${tagOrDigest}`;
      const missing = res.status === 404 && path.startsWith('manifests/') ? `: no such image ${image} in the registry` : '';
      throw new PullError(`${this.#ref.registry}/${this.#ref.repository}: GET ${path}: HTTP ${res.status}${missing}`);
    }
    return res;
  }

  async #fetch(url: string, headers: Record<string, string>): Promise<Response> {
    const h = { ...headers };
    if (this.#auth) h.authorization = this.#auth;
    try {
      return await fetch(url, { headers: h, redirect: 'follow', signal: AbortSignal.timeout(600_000) });
    } catch (err: unknown) {
      const cause = (err as { cause?: { message?: string } }).cause?.message;
      throw new PullError(`${this.#ref.registry}: ${url.replace(/\?.*$/, '')}: ${cause ?? (err instanceof Error ? err.message : String(err))}`);
    }
  }

  /** The anonymous token of a `Bearer realm=...,service=...,scope=...` challenge. */
  async #anonymousToken(challenge: string): Promise<string | undefined> {
    if (!/^Bearer\s/i.test(challenge)) return undefined;
    const params = Object.fromEntries([...challenge.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1].toLowerCase(), m[2]]));
    if (!params.realm) return undefined;
    const u = new URL(params.realm);
    if (params.service) u.searchParams.set('service', params.service);
    u.searchParams.set('scope', params.scope ?? `repository:${this.#ref.repository}:pull`);
    const res = await fetch(u, { signal: AbortSignal.timeout(60_000) }).catch((err: unknown) => {
      throw new PullError(`${this.#ref.registry}: token ${u.origin}${u.pathname}: ${String(err)}`);
    });
    if (!res.ok) throw new PullError(`${this.#ref.registry}: token ${u.origin}${u.pathname}: HTTP ${res.status}`);
    const body = (await res.json()) as { token?: string; access_token?: string };
    const t = body.token ?? body.access_token;
    return t ? `Bearer ${t}` : undefined;
  }
}

function sha256(bytes: Uint8Array): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}

function hexOf(digest: string): string {
  const m = /^sha256:([0-9a-f]{64})$/.exec(digest);
  if (!m) throw new PullError(`digest ${JSON.stringify(digest)}: only sha256 digests are supported`);
  return m[1];
}

interface Descriptor {
  mediaType?: string;
  digest: string;
  size: number;
  platform?: { os?: string; architecture?: string; variant?: string };
}

/**
 * The image store on the pod's disk. One pull per image at a time: a pull of an image in flight joins
 * it. Pulls of several images run side by side.
 */
export class ImageStore {
  readonly root: string;
  readonly #inFlight = new Map<string, Promise<StoredImage>>();

  /** @param root the store's directory, such as /data/images */
  constructor(root: string) {
    this.root = root;
  }

  /** The image a reference names, when the store has it (no registry asked). */
  cached(ref: string): StoredImage | undefined {
    try {
      const digest = fs.readFileSync(this.#refPath(ref), 'utf8').trim();
      return this.#load(digest);
    } catch {
      return undefined;
    }
  }

  /**
   * Pulls an image unless the store has it; a pull of the same reference in flight is joined (and
   * `opts` is not used).
   * @returns the stored image and whether it was there or joined (`cached`)
   * @throws PullError with the step and the registry's answer
   */
  async pull(ref: string, opts: PullOptions = {}): Promise<{ image: StoredImage; cached: boolean }> {
    const have = this.cached(ref);
    if (have) return { image: have, cached: true };
    const flight = this.#inFlight.get(ref);
    if (flight) return { image: await flight, cached: true };
    const p = this.#pull(ref, opts).finally(() => this.#inFlight.delete(ref));
    this.#inFlight.set(ref, p);
    return { image: await p, cached: false };
  }

  #refPath(ref: string): string {
    return join(this.root, 'refs', createHash('sha256').update(ref).digest('hex'));
  }

  #load(digest: string): StoredImage {
    const dir = join(this.root, hexOf(digest));
    const meta = JSON.parse(fs.readFileSync(join(dir, 'image.json'), 'utf8')) as { config: ImageConfig; sizeBytes: number };
    return { digest, rootfs: join(dir, 'rootfs'), config: meta.config, sizeBytes: meta.sizeBytes };
  }

  async #pull(refText: string, opts: PullOptions): Promise<StoredImage> {
    const ref = parseImageRef(refText);
    const reg = new Registry(ref, opts);
    let { desc, body } = await this.#manifest(reg, ref.digest || ref.tag, ref.digest);
    if (body.manifests) {
      const pick = (body.manifests as Descriptor[]).find((m) => m.platform?.os === 'linux' && m.platform?.architecture === 'amd64');
      if (!pick) throw new PullError(`${refText}: the index has no linux/amd64 manifest`);
      ({ desc, body } = await this.#manifest(reg, pick.digest, pick.digest));
    }
    const manifestDigest = desc;
    const hex = hexOf(manifestDigest);
    const dir = join(this.root, hex);
    if (fs.existsSync(join(dir, 'image.json'))) {
      await this.#writeRef(refText, manifestDigest);
      return this.#load(manifestDigest);
    }
    const layers = (body.layers ?? []) as Descriptor[];
    const configDesc = body.config as Descriptor | undefined;
    if (!configDesc) throw new PullError(`${refText}: the manifest has no config`);
    const cfgBytes = new Uint8Array(await (await reg.get(`blobs/${configDesc.digest}`)).arrayBuffer());
    if (sha256(cfgBytes) !== configDesc.digest) throw new PullError(`${refText}: config ${configDesc.digest}: the digest does not match`);
    const cfg = JSON.parse(Buffer.from(cfgBytes).toString('utf8')) as { config?: Record<string, unknown> };
    const c = cfg.config ?? {};
    const config: ImageConfig = {
      entrypoint: (c.Entrypoint as string[] | null) ?? [],
      cmd: (c.Cmd as string[] | null) ?? [],
      env: (c.Env as string[] | null) ?? [],
      workingDir: (c.WorkingDir as string | undefined) ?? '',
      user: (c.User as string | undefined) ?? '',
    };
    const tmp = `${dir}.pulling`;
    fs.rmSync(tmp, { recursive: true, force: true });
    fs.mkdirSync(join(tmp, 'rootfs'), { recursive: true });
    let size = 0;
    for (const layer of layers) {
      await this.#unpackLayer(reg, refText, layer, join(tmp, 'rootfs'), tmp);
      size += layer.size;
    }
    fs.writeFileSync(join(tmp, 'image.json'), JSON.stringify({ ref: refText, digest: manifestDigest, config, sizeBytes: size }));
    fs.rmSync(dir, { recursive: true, force: true });
    fs.renameSync(tmp, dir);
    await this.#writeRef(refText, manifestDigest);
    return this.#load(manifestDigest);
  }

  async #writeRef(ref: string, digest: string): Promise<void> {
    fs.mkdirSync(join(this.root, 'refs'), { recursive: true });
    const p = this.#refPath(ref);
    fs.writeFileSync(`${p}.tmp`, `${digest}\n`);
    fs.renameSync(`${p}.tmp`, p);
  }

  /** Fetches a manifest; checks its digest when the reference pins one. */
  async #manifest(reg: Registry, reference: string, want: string): Promise<{ desc: string; body: Record<string, unknown> }> {
    const res = await reg.get(`manifests/${reference}`, MANIFEST_TYPES);
    const bytes = new Uint8Array(await res.arrayBuffer());
    const digest = sha256(bytes);
    if (want && digest !== want) throw new PullError(`manifest ${want}: the digest does not match (got ${digest})`);
    try {
      return { desc: digest, body: JSON.parse(Buffer.from(bytes).toString('utf8')) as Record<string, unknown> };
    } catch {
      throw new PullError(`manifest ${reference}: not JSON`);
    }
  }

  /**
   * Downloads a layer into `tarPath`, decompressed (gzip, zstd or none, by its media type or its magic
   * bytes), its compressed bytes hashed on the way.
   * @throws PullError when the registry refuses; LayerTransferError when the transfer fails or the
   *   digest does not match
   */
  async #download(reg: Registry, layer: Descriptor, tarPath: string): Promise<void> {
    const res = await reg.get(`blobs/${layer.digest}`);
    const hash = createHash('sha256');
    const tee = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        hash.update(chunk);
        cb(null, chunk);
      },
    });
    const src = Readable.fromWeb(res.body as import('node:stream/web').ReadableStream<Uint8Array>);
    try {
      // Peek at the first bytes to choose the decompressor.
      const first: Buffer = await new Promise((resolve, reject) => {
        src.once('readable', () => resolve((src.read() as Buffer | null) ?? Buffer.alloc(0)));
        src.once('error', reject);
      });
      src.unshift(first);
      const mt = layer.mediaType ?? '';
      const isGzip = mt.endsWith('gzip') || (first[0] === 0x1f && first[1] === 0x8b);
      const isZstd = mt.endsWith('zstd') || (first.length >= 4 && first.readUInt32LE(0) === 0xfd2fb528);
      const stages: NodeJS.ReadWriteStream[] = [tee];
      if (isGzip) stages.push(zlib.createGunzip());
      else if (isZstd) stages.push(zlib.createZstdDecompress());
      await pipeline(src, ...(stages as [Transform]), fs.createWriteStream(tarPath));
    } catch (err: unknown) {
      throw new LayerTransferError(err instanceof Error ? err.message : String(err));
    }
    const got = `sha256:${hash.digest('hex')}`;
    if (got !== layer.digest) throw new LayerTransferError(`the digest does not match (got ${got})`);
  }

  /**
   * Downloads a layer (verifying its digest as it streams), decompresses it (gzip, zstd or none, by
   * its media type or its magic bytes) into a tar file, applies its whiteouts, and extracts it.
   */
  async #unpackLayer(reg: Registry, refText: string, layer: Descriptor, rootfs: string, work: string): Promise<void> {
    const tarPath = join(work, 'layer.tar');
    // A download cut off or corrupted on the way (a connection the registry or a proxy closed) is made
    // again, up to LAYER_TRIES times; the registry's refusals (PullError from get) are not.
    for (let attempt = 1; ; attempt++) {
      try {
        await this.#download(reg, layer, tarPath);
        break;
      } catch (err: unknown) {
        const retry = err instanceof LayerTransferError && attempt < LAYER_TRIES;
        if (!retry) throw err instanceof LayerTransferError ? new PullError(`${refText}: layer ${layer.digest}: ${err.message} (${attempt} tries)`) : err;
      }
    }
    // Whiteouts (OCI image spec, "Representing Changes"): `.wh.<name>` removes <name> of the layers
    // below; `.wh..wh..opq` empties its directory of them. They are applied before the extraction.
    const { stdout } = await run('tar', ['-tf', tarPath], { maxBuffer: 256 * 1024 * 1024 });
    const whiteouts: string[] = [];
    for (const raw of stdout.split('\n')) {
      const entry = raw.replace(/^\.\//, '');
      const base = entry.slice(entry.lastIndexOf('/') + 1);
      if (!base.startsWith('.wh.')) continue;
      whiteouts.push(entry);
      const parent = join(rootfs, entry.slice(0, entry.length - base.length));
      if (!parent.startsWith(rootfs)) continue;
      if (base === '.wh..wh..opq') {
        for (const e of fs.existsSync(parent) ? fs.readdirSync(parent) : []) fs.rmSync(join(parent, e), { recursive: true, force: true });
      } else {
        const target = join(parent, base.slice(4));
        if (target.startsWith(`${rootfs}/`)) fs.rmSync(target, { recursive: true, force: true });
      }
    }
    try {
      await run('tar', ['-xpf', tarPath, '-C', rootfs], { maxBuffer: 16 * 1024 * 1024 });
    } catch (err: unknown) {
      throw new PullError(`${refText}: layer ${layer.digest}: tar: ${(err as { stderr?: string }).stderr?.trim() || String(err)}`);
    }
    for (const w of whiteouts) fs.rmSync(join(rootfs, w), { force: true });
    fs.rmSync(tarPath, { force: true });
  }
}
