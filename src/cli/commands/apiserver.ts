/** kube32-cli commands: `apiserver` (the API server alone), owned by src/apiserver. */
import type { Command } from 'commander';

/** Adds this file's commands to `program`. */
export function register(_program: Command): void {
  // Not built yet.
}
