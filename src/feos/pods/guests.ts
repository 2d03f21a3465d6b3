/**
 * The installed guest versions (seed 000, "Directories": /usr/lib/feos/guest/<version>/): directories
 * of the guest dir with vmlinuz, initramfs, system.img, data.qcow2 and guest.json, as
 * scripts/build-guest.sh makes them. Versions sort by name (the build time first); pods boot the newest.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

const FILES = ['vmlinuz', 'initramfs', 'system.img', 'data.qcow2', 'guest.json'];

/** The complete guest versions in `guestDir`, oldest first. */
export function guestVersions(guestDir: string): string[] {
  let names: string[];
  try {
    names = readdirSync(guestDir);
  } catch {
    return [];
  }
  return names.filter((v) => FILES.every((f) => existsSync(join(guestDir, v, f)))).sort();
}
