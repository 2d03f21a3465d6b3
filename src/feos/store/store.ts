/**
 * The object store that pods hibernate into (seed 000, "A pod": Hibernate and Restore; ADR 0008). The
 * seed's store is S3 behind diskd; this node has neither, so the pod layer talks to this small
 * interface, and `openObjectStore` picks the implementation from `--object-store`'s URL (a local
 * directory, `file:///path`, is the one built: docs/feos/departures.md).
 *
 * Keys are `/`-separated segments of letters, digits, `.`, `_` and `-`, none starting with `.`. An
 * object is seen whole or not at all: `put` makes it visible only once every byte is written and kept.
 */

/** An object's size and SHA-256, as `put` measured them while writing. */
export interface PutResult {
  sizeBytes: number;
  /** Lowercase hex; '' for a put `unhashed`. */
  sha256: string;
}

/** Options of a put. */
export interface PutOptions extends StoreCallOptions {
  /** Called with the bytes written so far. */
  onProgress?: (bytes: number) => void;
  /**
   * The bytes are not hashed (no SHA-256 in the result, none kept as the object's metadata, and on S3 a body given
   * whole is sent UNSIGNED-PAYLOAD: its SigV4 signature does not cover it): for objects read only in parts whose own
   * SHA-256s are checked, as a pack's chunks are (packs.ts). A whole read of one checks nothing.
   */
  unhashed?: boolean;
}

/** Options of a store call. */
export interface StoreCallOptions {
  /** Ends the call; a `put` that is cut leaves no object. */
  signal?: AbortSignal;
}

/** Options of a ranged read (`ObjectStore.getRange`). */
export interface RangeOptions extends StoreCallOptions {
  /** The buffer to read into (at least the range's length). */
  into?: Uint8Array;
}

/**
 * The buffer a ranged read of `length` bytes goes into: `into` (as a Buffer of the same memory) when given, checked
 * to hold them; undefined without it.
 * @throws RangeError when `into` is shorter than `length`
 */
export function rangeBuffer(into: Uint8Array | undefined, length: number): Buffer | undefined {
  if (!into) return undefined;
  if (into.byteLength < length) throw new RangeError(`a range of ${length} bytes does not fit the ${into.byteLength} bytes given to read it into`);
  return Buffer.from(into.buffer, into.byteOffset, into.byteLength);
}

/** A store of objects by key. */
export interface ObjectStore {
  /** The store's URL, as `--object-store` gave it (for messages). */
  readonly url: string;
  /**
   * Writes an object whole, replacing one of the key; it is visible only once complete.
   * @throws ObjectStoreError naming the key and the step; AbortError when `signal` aborts
   */
  put(key: string, body: AsyncIterable<Uint8Array> | Uint8Array, options?: PutOptions): Promise<PutResult>;
  /**
   * Writes an object only when the key has none (a claim: S3's `If-None-Match: *`).
   * @returns false when the key has an object already
   */
  putIfAbsent(key: string, body: Uint8Array): Promise<boolean>;
  /** An object's bytes as they are read. @throws ObjectNotFoundError */
  get(key: string, options?: StoreCallOptions): AsyncIterable<Uint8Array>;
  /** An object's whole bytes (for small objects such as manifests). @throws ObjectNotFoundError */
  getBytes(key: string): Promise<Uint8Array>;
  /**
   * `length` bytes of an object from byte `offset` (a ranged GET: the packs' chunks).
   * @param options.into a buffer of at least `length` bytes to read them into (reused by the caller: a fresh one
   *   costs its page faults); the answer is then a view of its first `length` bytes. Without it, a buffer of its own.
   *   After a failure its bytes are whatever came.
   * @throws ObjectNotFoundError; ObjectStoreError (failure `damaged`) naming the key when the object is shorter
   *   than the range (it is not what was put); RangeError when `into` is shorter than `length`
   */
  getRange(key: string, offset: number, length: number, options?: RangeOptions): Promise<Uint8Array>;
  /** Whether the key has an object. */
  exists(key: string): Promise<boolean>;
  /** The keys below `prefix` (a key's leading segments), sorted. */
  list(prefix: string): Promise<string[]>;
  /** Removes an object; a key without one is fine. */
  delete(key: string): Promise<void>;
  /**
   * Removes what cut puts left below `prefix` (half-written objects, empty directories), where the
   * store keeps such things; only for a prefix that no put of anyone writes to any more.
   */
  deleteLeftovers?(prefix: string): Promise<void>;
}

/**
 * Why a store call failed, for the status it becomes (seed 000's codes): `unavailable`, the store did not
 * answer or failed (UNAVAILABLE, worth another try); `refused`, the store is not usable as configured, such
 * as a bucket that does not exist or credentials it refuses (FAILED_PRECONDITION, until the operator fixes
 * it); `damaged`, the bytes are not what was put (DATA_LOSS).
 */
export type ObjectStoreFailure = 'unavailable' | 'refused' | 'damaged';

/** A store call that failed: the key and the step are named, the system's error is the cause. */
export class ObjectStoreError extends Error {
  readonly key: string;
  readonly failure: ObjectStoreFailure;
  constructor(key: string, message: string, options?: { cause?: unknown; failure?: ObjectStoreFailure }) {
    super(message, options);
    this.name = 'ObjectStoreError';
    this.key = key;
    this.failure = options?.failure ?? 'unavailable';
  }
}

/** The gRPC code a failed store call becomes: FAILED_PRECONDITION, DATA_LOSS or UNAVAILABLE (anything else). */
export function storeFailureCode(err: unknown): 'FAILED_PRECONDITION' | 'DATA_LOSS' | 'UNAVAILABLE' {
  const failure = err instanceof ObjectStoreError ? err.failure : undefined;
  return failure === 'refused' ? 'FAILED_PRECONDITION' : failure === 'damaged' ? 'DATA_LOSS' : 'UNAVAILABLE';
}

/** The key has no object. */
export class ObjectNotFoundError extends ObjectStoreError {
  constructor(key: string, url: string) {
    super(key, `${url}: no object ${key}`);
    this.name = 'ObjectNotFoundError';
  }
}

const SEGMENT = /^[A-Za-z0-9_-][A-Za-z0-9._-]*$/;

/**
 * Checks a key's form.
 * @throws RangeError naming the key and the rule
 */
export function checkKey(key: string): string[] {
  const parts = key.split('/');
  for (const p of parts) {
    if (!SEGMENT.test(p)) {
      throw new RangeError(`object key ${JSON.stringify(key)}: want '/'-separated segments of letters, digits, '.', '_' and '-', none starting with '.'`);
    }
  }
  return parts;
}
