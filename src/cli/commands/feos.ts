/**
 * kube32-cli commands for FeOS nodes (docs/feos/fleet.md, "Join tokens"): their flags and help; the code
 * is loaded only when a command runs (../actions/feos-token.ts).
 *
 * - `feos token create [--ttl 24h] [--description TEXT]`: prints the whole `feos-join-<id>-<secret>.<pin>`.
 * - `feos token list [-o json|yaml]`: the tokens as a table (ID, TTL, EXPIRES, USAGES, DESCRIPTION).
 * - `feos token delete ID...`: deletes tokens; a node that has not joined with one can no longer.
 */
import { type Command, Option } from 'commander';
import type { TokenFlags } from '../actions/feos-token.ts';
import { addClusterFlags } from '../flags.ts';

/** Adds `feos token create|list|delete` to `program`. */
export function register(program: Command): void {
  const feos = program.command('feos').summary('FeOS nodes of the cluster: join tokens').description('Commands for FeOS nodes (feosd --control-plane) of this cluster.');
  const token = feos
    .command('token')
    .summary('Join tokens for FeOS nodes')
    .description('Join tokens, kept as kube-system Secrets of type bootstrap.kubernetes.io/token. A node joins with the whole token in its --join-token-file.');
  addClusterFlags(
    token
      .command('create')
      .summary('Create a join token and print it')
      .description(
        "Create a join token and print it whole: feos-join-<id>-<secret>.<pin>, where the pin is the SHA-256 of the cluster CA's public key (the node checks the control plane by it before sending the secret).",
      )
      .option('--ttl <duration>', 'how long the token is valid (0: for ever), e.g. 24h, 30m', '24h')
      .option('--description <text>', 'a note on what the token is for', ''),
    false,
  ).action(async (flags: TokenFlags) => (await import('../actions/feos-token.ts')).tokenCreate(flags));
  addClusterFlags(
    token
      .command('list')
      .summary('List the join tokens')
      .addOption(new Option('-o, --output <format>', 'Output format. One of: (json, yaml).')),
    false,
  ).action(async (flags: TokenFlags) => (await import('../actions/feos-token.ts')).tokenList(flags));
  addClusterFlags(
    token.command('delete').summary('Delete join tokens').argument('<id...>', 'token IDs (the 6 characters after feos-join-)'),
    false,
  ).action(async (ids: string[], flags: TokenFlags) => (await import('../actions/feos-token.ts')).tokenDelete(ids, flags));
}
