/** Where pods hibernate: the object store interface and its implementations. */
export { type ObjectStore, type PutResult, type StoreCallOptions, ObjectStoreError, ObjectNotFoundError, checkKey } from './store.ts';
export { LocalDirObjectStore } from './local-dir.ts';
import { LocalDirObjectStore } from './local-dir.ts';
import type { ObjectStore } from './store.ts';

/**
 * The object store that `--object-store URL` names: `file:///absolute/path` (a local directory; made
 * when missing at the first put). S3 is not built here (docs/feos/departures.md).
 * @throws RangeError naming the URL and the forms taken
 */
export function openObjectStore(url: string): ObjectStore {
  if (url.startsWith('file:')) return new LocalDirObjectStore(url);
  throw new RangeError(`--object-store ${JSON.stringify(url)}: want file:///absolute/path (s3:// is not built on this node)`);
}
