/**
 * The object store on S3 (`--object-store s3://BUCKET/PREFIX`, seed 000, "A pod": Hibernate and Restore; the
 * seed keeps `S3_BUCKET` and `AWS_*` in a root-only defaults file). Objects are `<PREFIX>/<key>` in the
 * bucket, through `@aws-sdk/client-s3` and `@aws-sdk/lib-storage` (multipart, parts in parallel), whose
 * default chain reads the credentials (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
 * `AWS_PROFILE` and the shared credentials file, ...).
 *
 * S3 makes an object visible only once its PUT, or its multipart upload's completion, succeeded: a put
 * that is cut leaves no object (an aborted multipart upload is aborted, so no parts are kept either). A put
 * measures the bytes' SHA-256 as they go and keeps it as the object's metadata `x-amz-meta-sha256` where
 * it is known before the upload (a body given whole: manifests, claims), which `get` checks at the end of
 * the bytes; the checkpoint's manifest keeps every file's SHA-256, and the restore checks the large
 * files against it (checkpoint.ts), so a damaged object is a DATA_LOSS however the server answers.
 *
 * A claim (`putIfAbsent`) is a PUT with `If-None-Match: *`. Servers without conditional PUTs (OpenStack
 * Swift's s3api 2.30 answers 501 NotImplemented) fall back to a HEAD, then a PUT: two claims at the same
 * moment may then both win (docs/feos/departures.md).
 */
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { errorMessage } from '../api/index.ts';
import { checkKey, ObjectNotFoundError, type ObjectStore, ObjectStoreError, type PutOptions, type PutResult, type RangeOptions, rangeBuffer, type StoreCallOptions } from './store.ts';

/** How an S3 store is reached, beside its URL. */
export interface S3StoreOptions {
  /** The S3 endpoint (`--s3-endpoint`, such as `http://127.0.0.1:8080`); none = AWS's for the region. */
  endpoint?: string;
  /** `--s3-region`; none = the SDK's (`AWS_REGION`, the profile), else `us-east-1`. */
  region?: string;
  /**
   * Path-style addressing (`http://endpoint/BUCKET/key`), which servers other than AWS's need.
   * @default true with an endpoint, false without
   */
  forcePathStyle?: boolean;
  /** A client to use instead of one made from the options (tests, benchmarks). */
  client?: S3Client;
}

/** Bytes of each part of a multipart upload, and how many go at once (s3-on-swift.md: 8 MiB, 4). */
export const PART_BYTES = 8 * 1024 * 1024;
export const PARTS_AT_ONCE = 4;

/** S3's codes of a store that is not usable as configured: FAILED_PRECONDITION, not worth a retry as it is. */
const REFUSED = new Set(['NoSuchBucket', 'AccessDenied', 'InvalidAccessKeyId', 'SignatureDoesNotMatch', 'InvalidBucketName', 'AllAccessDisabled', 'AccountProblem', 'InvalidToken', 'ExpiredToken']);

const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/**
 * Parses `s3://BUCKET/PREFIX`.
 * @throws RangeError naming the URL and the form wanted
 */
export function parseS3Url(url: string): { bucket: string; prefix: string } {
  const m = /^s3:\/\/([^/]+)(?:\/(.*))?$/.exec(url);
  const want = 'want s3://BUCKET/PREFIX (a bucket of 3 to 63 lowercase letters, digits, . and -; the prefix optional)';
  if (!m || !BUCKET.test(m[1] ?? '')) throw new RangeError(`--object-store ${JSON.stringify(url)}: ${want}`);
  const prefix = (m[2] ?? '').replace(/\/+$/, '');
  if (prefix) {
    try {
      checkKey(prefix);
    } catch {
      throw new RangeError(`--object-store ${JSON.stringify(url)}: the prefix ${JSON.stringify(prefix)}: want '/'-separated segments of letters, digits, '.', '_' and '-'`);
    }
  }
  return { bucket: m[1] as string, prefix };
}

function statusOf(err: unknown): number | undefined {
  return (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
}

function codeOf(err: unknown): string {
  if (err instanceof S3ServiceException) return err.name;
  return (err as { name?: string; Code?: string }).Code ?? (err as { name?: string }).name ?? '';
}

function isNotFound(err: unknown): boolean {
  const code = codeOf(err);
  return code === 'NoSuchKey' || code === 'NotFound' || (statusOf(err) === 404 && code !== 'NoSuchBucket');
}

/**
 * What an S3 error says, for a message: the server's code and status (`NoSuchBucket (404)`), or the
 * network's error (`connect ECONNREFUSED ...`).
 */
export function describeS3Error(err: unknown): string {
  const status = statusOf(err);
  const code = codeOf(err);
  if (status !== undefined) {
    const msg = errorMessage(err);
    return `${code || 'error'} (${status})${msg && msg !== code && msg !== 'UnknownError' ? `: ${msg}` : ''}`;
  }
  return errorMessage(err);
}

/** An object store in an S3 bucket. */
export class S3ObjectStore implements ObjectStore {
  readonly url: string;
  readonly bucket: string;
  readonly prefix: string;
  readonly client: S3Client;
  #conditionalPuts = true;

  /**
   * @param url `s3://BUCKET/PREFIX`
   * @throws RangeError when the URL is not of that form
   */
  constructor(url: string, options: S3StoreOptions = {}) {
    const { bucket, prefix } = parseS3Url(url);
    this.url = url;
    this.bucket = bucket;
    this.prefix = prefix;
    this.client =
      options.client ??
      new S3Client({
        endpoint: options.endpoint,
        region: options.region ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? 'us-east-1',
        forcePathStyle: options.forcePathStyle ?? options.endpoint !== undefined,
        // Checksums only where S3 requires them: servers such as Swift's s3api know no trailing checksums.
        requestChecksumCalculation: 'WHEN_REQUIRED',
        responseChecksumValidation: 'WHEN_REQUIRED',
      });
  }

  #key(key: string): string {
    checkKey(key);
    return this.prefix ? `${this.prefix}/${key}` : key;
  }

  #error(key: string, step: string, err: unknown): ObjectStoreError {
    // The SDK refuses a region that cannot be a host name before it sends anything: the configuration too.
    // The SDK's credential chain found no keys at all (no AWS_ACCESS_KEY_ID, profile or role): the configuration
    // too, named as such (the chain's own message names no variable).
    const noKeys = codeOf(err) === 'CredentialsProviderError' || /Could not load credentials from any providers/.test(errorMessage(err));
    const refused = noKeys || REFUSED.has(codeOf(err)) || statusOf(err) === 403 || /Region not accepted|Invalid region/i.test(errorMessage(err));
    const hint = noKeys
      ? ' (no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in feosd\'s environment, or AWS_PROFILE, ~/.aws/credentials or an instance role)'
      : refused
        ? ` (check the bucket ${this.bucket}, --s3-endpoint, --s3-region and the AWS credentials)`
        : '';
    return new ObjectStoreError(key, `${this.url}: ${step} ${key}: ${describeS3Error(err)}${hint}`, { cause: err, failure: refused ? 'refused' : 'unavailable' });
  }

  async put(key: string, body: AsyncIterable<Uint8Array> | Uint8Array, options: PutOptions = {}): Promise<PutResult> {
    const Key = this.#key(key);
    const hash = createHash('sha256');
    let size = 0;
    const signal = options.signal;
    signal?.throwIfAborted();
    if (body instanceof Uint8Array) {
      // A pack's SHA-256 would say nothing its chunks' do not, and cost a pass over its bytes on this thread.
      const sha256 = options.unhashed ? '' : hash.update(body).digest('hex');
      const command = new PutObjectCommand({ Bucket: this.bucket, Key, Body: body, ...(sha256 ? { Metadata: { sha256 } } : {}) });
      // Nor signed: SigV4 over http hashes the whole body into the signature (a pass over every pack on this thread,
      // 0.1 to 0.4 s of CPU for a hibernation's 180 MiB here) unless the request says UNSIGNED-PAYLOAD, as S3 allows.
      // The signer takes a request's `x-amz-content-sha256` as it is.
      if (options.unhashed) {
        command.middlewareStack.add(
          (next) => async (args) => {
            const request = args.request as { headers?: Record<string, string> };
            if (request.headers) request.headers['x-amz-content-sha256'] = 'UNSIGNED-PAYLOAD';
            return next(args);
          },
          { step: 'build', name: 'feosUnsignedPayload' },
        );
      }
      try {
        await this.client.send(command, { abortSignal: signal });
      } catch (err: unknown) {
        if (signal?.aborted) throw signal.reason ?? err;
        throw this.#error(key, 'put', err);
      }
      options.onProgress?.(body.byteLength);
      return { sizeBytes: body.byteLength, sha256 };
    }
    // The body is hashed and counted as lib-storage reads it into parts.
    async function* measured(): AsyncIterable<Uint8Array> {
      for await (const chunk of body as AsyncIterable<Uint8Array>) {
        signal?.throwIfAborted();
        if (!options.unhashed) hash.update(chunk);
        size += chunk.byteLength;
        yield chunk;
      }
    }
    const upload = new Upload({
      client: this.client,
      params: { Bucket: this.bucket, Key, Body: Readable.from(measured(), { objectMode: false }) },
      partSize: PART_BYTES,
      queueSize: PARTS_AT_ONCE,
      leavePartsOnError: false,
    });
    upload.on('httpUploadProgress', (p) => {
      if (p.loaded !== undefined) options.onProgress?.(p.loaded);
    });
    const onAbort = () => void upload.abort().catch(() => {});
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await upload.done();
    } catch (err: unknown) {
      if (signal?.aborted) throw signal.reason ?? err;
      throw this.#error(key, 'put', err);
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
    signal?.throwIfAborted();
    return { sizeBytes: size, sha256: options.unhashed ? '' : hash.digest('hex') };
  }

  async putIfAbsent(key: string, body: Uint8Array): Promise<boolean> {
    const Key = this.#key(key);
    if (this.#conditionalPuts) {
      try {
        await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key, Body: body, IfNoneMatch: '*' }));
        return true;
      } catch (err: unknown) {
        const status = statusOf(err);
        if (status === 412 || codeOf(err) === 'PreconditionFailed') return false;
        // A conditional write racing another answers 409 ConditionalRequestConflict on AWS: the other won.
        if (status === 409 && codeOf(err) === 'ConditionalRequestConflict') return false;
        if (status !== 501 && codeOf(err) !== 'NotImplemented') throw this.#error(key, 'claim', err);
        this.#conditionalPuts = false;
      }
    }
    if (await this.exists(key)) return false;
    try {
      await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key, Body: body }));
      return true;
    } catch (err: unknown) {
      throw this.#error(key, 'claim', err);
    }
  }

  async *get(key: string, options: StoreCallOptions = {}): AsyncIterable<Uint8Array> {
    const Key = this.#key(key);
    let stream: AsyncIterable<Uint8Array>;
    let want: string | undefined;
    try {
      const res = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key }), { abortSignal: options.signal });
      stream = res.Body as unknown as AsyncIterable<Uint8Array>;
      want = res.Metadata?.sha256;
    } catch (err: unknown) {
      if (options.signal?.aborted) throw options.signal.reason ?? err;
      if (isNotFound(err)) throw new ObjectNotFoundError(key, this.url);
      throw this.#error(key, 'get', err);
    }
    const hash = want ? createHash('sha256') : undefined;
    try {
      for await (const chunk of stream) {
        options.signal?.throwIfAborted();
        hash?.update(chunk);
        yield chunk;
      }
    } catch (err: unknown) {
      if (options.signal?.aborted) throw options.signal.reason ?? err;
      throw this.#error(key, 'get', err);
    }
    const got = hash?.digest('hex');
    if (got !== undefined && got !== want) {
      throw new ObjectStoreError(key, `${this.url}: get ${key}: the bytes' SHA-256 ${got} is not the ${want} they were put with (damaged in storage or transfer)`, { failure: 'damaged' });
    }
  }

  async getBytes(key: string): Promise<Uint8Array> {
    const parts: Uint8Array[] = [];
    for await (const c of this.get(key)) parts.push(c);
    return Buffer.concat(parts);
  }

  async getRange(key: string, offset: number, length: number, options: RangeOptions = {}): Promise<Uint8Array> {
    const Key = this.#key(key);
    const into = rangeBuffer(options.into, length);
    if (length === 0) return new Uint8Array(0);
    const short = (got: number) =>
      new ObjectStoreError(key, `${this.url}: get ${key}: bytes ${offset} to ${offset + length - 1} asked, ${got} came (the object is not what was put)`, { failure: 'damaged' });
    let body: (AsyncIterable<Uint8Array> & { destroy?: () => void }) | undefined;
    try {
      const res = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key, Range: `bytes=${offset}-${offset + length - 1}` }), { abortSignal: options.signal });
      if (!into) {
        const bytes = await res.Body!.transformToByteArray();
        if (bytes.byteLength !== length) throw short(bytes.byteLength);
        return bytes;
      }
      // The body's pieces (the socket's reads) copied once, into the caller's buffer: no concatenation into a fresh
      // one (bench/s3-restore-copy: that copy and the fresh buffers' page faults and collection were most of a
      // restore's CPU beyond the SDK's own download).
      body = res.Body as unknown as AsyncIterable<Uint8Array> & { destroy?: () => void };
      let got = 0;
      for await (const c of body) {
        if (got + c.byteLength > length) throw short(got + c.byteLength);
        into.set(c, got);
        got += c.byteLength;
      }
      if (got !== length) throw short(got);
      return into.subarray(0, length);
    } catch (err: unknown) {
      body?.destroy?.();
      if (err instanceof ObjectStoreError) throw err;
      if (options.signal?.aborted) throw options.signal.reason ?? err;
      if (isNotFound(err)) throw new ObjectNotFoundError(key, this.url);
      // A range past the object's end: it is shorter than the manifest says.
      if (statusOf(err) === 416 || codeOf(err) === 'InvalidRange') {
        throw new ObjectStoreError(key, `${this.url}: get ${key}: bytes ${offset} to ${offset + length - 1} asked, the object is shorter (it is not what was put)`, { failure: 'damaged' });
      }
      throw this.#error(key, 'get', err);
    }
  }

  async exists(key: string): Promise<boolean> {
    const Key = this.#key(key);
    try {
      await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key }));
      return true;
    } catch (err: unknown) {
      if (isNotFound(err)) return false;
      throw this.#error(key, 'head', err);
    }
  }

  async list(prefix: string): Promise<string[]> {
    const clean = prefix.replace(/\/+$/, '');
    if (clean) checkKey(clean);
    const full = clean ? `${this.#key(clean)}/` : this.prefix ? `${this.prefix}/` : '';
    const strip = this.prefix ? this.prefix.length + 1 : 0;
    const keys: string[] = [];
    let token: string | undefined;
    try {
      do {
        const res = await this.client.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: full, ContinuationToken: token }));
        for (const o of res.Contents ?? []) if (o.Key) keys.push(o.Key.slice(strip));
        token = res.IsTruncated ? res.NextContinuationToken : undefined;
      } while (token);
    } catch (err: unknown) {
      throw this.#error(prefix, 'list', err);
    }
    return keys.sort();
  }

  async delete(key: string): Promise<void> {
    const Key = this.#key(key);
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key }));
    } catch (err: unknown) {
      if (isNotFound(err)) return;
      throw this.#error(key, 'delete', err);
    }
  }
}
