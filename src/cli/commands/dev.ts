/** kube32-cli commands: `dev MODULE.wasm` (run one pod locally), owned by src/wasm. */
import type { Command } from 'commander';

/** Adds this file's commands to `program`. */
export function register(_program: Command): void {
  // Not built yet.
}
