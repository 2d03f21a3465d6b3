/** kube32-cli commands: `control-plane` (the API server and the controllers in one process), owned by src/controllers. */
import type { Command } from 'commander';

/** Adds this file's commands to `program`. */
export function register(_program: Command): void {
  // Not built yet.
}
