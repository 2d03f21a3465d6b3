/**
 * kube32-cli commands on K32S snapshot files (seed 002, "Snapshot format"), owned by src/k32s:
 *
 * - `snapshot inspect FILE|-`: reads a snapshot (a file, or standard input for `-`) as a restore
 *   would, without keeping its memory, and prints its header and sections; `-o json|yaml` prints the
 *   same facts, and the small sections in full, for programs. A snapshot that the reader refuses ends
 *   the command with exit code 1 and the reader's message; a snapshot whose trailer does not match
 *   is still shown, then the command fails with the seed's message.
 *
 * Get a snapshot with `kubectl get --raw /apis/kube32.io/v1/namespaces/NS/checkpoints/NAME/data > f.k32s`.
 *
 * This file holds the flags and help; the code, and the K32S reader with it, is loaded only when
 * `snapshot inspect` runs (../actions/snapshot.ts).
 */
import { Option, type Command } from 'commander';
import type { InspectFlags } from '../actions/snapshot.ts';

/** Adds this file's commands to `program`. */
export function register(program: Command): void {
  const snapshot = program.command('snapshot').description('Work with K32S snapshot files (the data of Checkpoints)');
  snapshot
    .command('inspect')
    .description('Check a K32S snapshot and print its header and sections ("-" reads standard input)')
    .argument('<file>', 'the snapshot file, or - for standard input')
    .addOption(new Option('-o, --output <format>', 'Output format. One of: (json, yaml).'))
    .action(async (file: string, flags: InspectFlags) => {
      const { inspect } = await import('../actions/snapshot.ts');
      await inspect(file, flags);
    });
}
