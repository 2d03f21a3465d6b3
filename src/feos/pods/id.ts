/**
 * Pod IDs (seed 000, "A pod"): 11 characters of lowercase Crockford base32 with a letter first, which
 * feosctl (or feosd, for a create without one) mints; or a UUID, which pods made before keep. Any other
 * ID is INVALID_ARGUMENT.
 */
import { randomBytes } from 'node:crypto';
import { FeosError } from '../api/index.ts';

/** Crockford's base32 alphabet, lowercase (no i, l, o, u). */
export const CROCKFORD = '0123456789abcdefghjkmnpqrstvwxyz';
const SHORT_ID = /^[a-hjkmnp-tv-z][0-9a-hjkmnp-tv-z]{10}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Whether `id` is a short pod ID. */
export function isShortPodId(id: string): boolean {
  return SHORT_ID.test(id);
}

/**
 * Checks a pod ID and returns it in its canonical form (a UUID in lowercase).
 * @throws FeosError INVALID_ARGUMENT naming the ID
 */
export function parsePodId(id: string): string {
  if (SHORT_ID.test(id)) return id;
  const lower = id.toLowerCase();
  if (UUID.test(lower)) return lower;
  throw new FeosError(
    'INVALID_ARGUMENT',
    `pod ID ${JSON.stringify(id)}: want 11 characters of lowercase Crockford base32 with a letter first, or a UUID`,
  );
}

/** A new short pod ID: a letter of the alphabet's 22, then 10 random characters (52 bits). */
export function mintPodId(): string {
  const bytes = randomBytes(11);
  const letters = CROCKFORD.slice(10);
  let id = letters[bytes[0] % letters.length];
  for (let i = 1; i < 11; i++) id += CROCKFORD[bytes[i] & 31];
  return id;
}
