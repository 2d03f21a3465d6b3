/**
 * A pod's link names (the seed's "Devices and routes"): its TAP device `pod-<ID>` and its MAC
 * address 06:00 and the first four bytes of the SHA-256 of its ID. A pod with a UUID has
 * `pod-<8 hex digits>` (the UUID's first eight), which are its MAC address's four bytes too.
 */
import { createHash } from 'node:crypto';

const SHORT_ID = /^[a-hjkmnp-tv-z][0-9a-hjkmnp-tv-z]{10}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The prefix of every pod's TAP device; the table matches `pod-*`. */
export const TAP_PREFIX = 'pod-';

/**
 * Checks a pod ID: 11 characters of lowercase Crockford base32 with a letter first, or a lowercase UUID.
 * @throws RangeError naming the ID
 */
export function checkPodId(podId: string): void {
  if (!SHORT_ID.test(podId) && !UUID.test(podId)) {
    throw new RangeError(`pod ID "${podId}": must be 11 characters of lowercase Crockford base32 with a letter first, or a UUID`);
  }
}

/** The pod's TAP device: `pod-<ID>`, or `pod-<first 8 hex digits>` for a UUID. @throws RangeError as {@link checkPodId} */
export function tapName(podId: string): string {
  checkPodId(podId);
  return UUID.test(podId) ? `${TAP_PREFIX}${podId.slice(0, 8)}` : `${TAP_PREFIX}${podId}`;
}

/** The guest's MAC address, "06:00:xx:xx:xx:xx". @throws RangeError as {@link checkPodId} */
export function podMac(podId: string): string {
  checkPodId(podId);
  const four = UUID.test(podId) ? Buffer.from(podId.slice(0, 8), 'hex') : createHash('sha256').update(podId).digest().subarray(0, 4);
  return ['06', '00', ...[...four].map((b) => b.toString(16).padStart(2, '0'))].join(':');
}
