/**
 * A volume's labels (feos.volume.v1.Volume.labels) and their limits. The seed gives none; they are
 * Kubernetes' label rules (docs/feos/feosd.md, "Volumes"), so that a label an operator or a control plane
 * copies from Kubernetes objects fits, and a volume record stays small (a 120 KB label and 3 000 labels
 * were taken before).
 */
import { FeosError } from '../api/index.ts';

/** The most labels a volume has. */
export const MAX_VOLUME_LABELS = 64;
/** A label's name part, and a value: at most 63 characters, alphanumeric at both ends, '-', '_', '.' inside. */
const NAME = /^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$/;
/** A key's prefix: a DNS subdomain of at most 253 characters (lowercase labels of 1 to 63). */
const PREFIX = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;

/**
 * Checks a volume's labels as Kubernetes checks an object's: at most `MAX_VOLUME_LABELS`; a key is
 * `[prefix/]name`, the name 1 to 63 letters, digits, '-', '_' and '.' that begins and ends with a letter
 * or digit, the prefix a DNS subdomain of at most 253 characters; a value is empty or as a name.
 * @throws FeosError INVALID_ARGUMENT naming the volume, the key and the rule
 */
export function checkVolumeLabels(id: string, labels: Record<string, string>): void {
  const keys = Object.keys(labels);
  if (keys.length > MAX_VOLUME_LABELS) throw bad(id, `${keys.length} labels, at most ${MAX_VOLUME_LABELS}`);
  for (const k of keys) {
    const shown = JSON.stringify(k.length > 80 ? `${k.slice(0, 80)}...` : k);
    const slash = k.indexOf('/');
    const prefix = slash >= 0 ? k.slice(0, slash) : undefined;
    const name = slash >= 0 ? k.slice(slash + 1) : k;
    if (prefix !== undefined && (prefix.length > 253 || !PREFIX.test(prefix))) {
      throw bad(id, `label key ${shown}: its prefix must be a DNS subdomain (lowercase letters, digits, '-' and '.') of at most 253 characters`);
    }
    if (!NAME.test(name)) {
      throw bad(id, `label key ${shown}: its name must be 1 to 63 letters, digits, '-', '_' and '.', beginning and ending with a letter or digit`);
    }
    const v = labels[k];
    if (v !== '' && !NAME.test(v)) {
      throw bad(id, `label ${shown}: its value (${v.length} characters) must be empty or at most 63 letters, digits, '-', '_' and '.', beginning and ending with a letter or digit`);
    }
  }
}

function bad(id: string, msg: string): FeosError {
  return new FeosError('INVALID_ARGUMENT', `volume ${id}: ${msg}`);
}
