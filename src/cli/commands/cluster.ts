/** kube32-cli commands: `up`, `control-plane` (a local cluster), owned by the main-job work (src/cli). */
import type { Command } from 'commander';

/** Adds this file's commands to `program`. */
export function register(_program: Command): void {
  // Not built yet.
}
