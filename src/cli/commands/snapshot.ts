/** kube32-cli commands: `snapshot inspect FILE` (K32S), owned by src/k32s. */
import type { Command } from 'commander';

/** Adds this file's commands to `program`. */
export function register(_program: Command): void {
  // Not built yet.
}
