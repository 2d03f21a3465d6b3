/**
 * kube32-cli: the command line of Kube32. Each command lives in `commands/<name>.ts` and exports
 * `register(program)`; this file only assembles them and maps errors to exit codes the way kubectl
 * does (1 for a failed command, with the message on standard error).
 */
import { Command, CommanderError } from 'commander';
import { CliError } from './errors.ts';
import { register as registerSnapshot } from './commands/snapshot.ts';
import { register as registerDev } from './commands/dev.ts';
import { register as registerApiServer } from './commands/apiserver.ts';
import { register as registerControlPlane } from './commands/control-plane.ts';
import { register as registerCluster } from './commands/cluster.ts';
import { register as registerWorkloads } from './commands/workloads.ts';

/** Builds the whole command tree; exported for tests. */
export function buildProgram(): Command {
  const program = new Command('kube32-cli')
    .description('Kube32: a Kubernetes-compatible cluster whose pods are WebAssembly modules that move with their state')
    .version('0.1.0')
    .showHelpAfterError()
    .exitOverride();
  registerSnapshot(program);
  registerDev(program);
  registerApiServer(program);
  registerControlPlane(program);
  registerCluster(program);
  registerWorkloads(program);
  return program;
}

/**
 * Runs the CLI with `argv` as `process.argv` gives it. Exits non-zero with a one-line message on
 * any error; commands that want another exit code throw a `CliError`.
 */
export async function main(argv: string[]): Promise<void> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
  } catch (err: unknown) {
    if (err instanceof CommanderError) {
      // commander already printed its message (or the help/version text).
      process.exitCode = err.exitCode;
      return;
    }
    const message = err instanceof Error ? err.message : String(err);
    process.stderr.write(`error: ${message}\n`);
    process.exitCode = err instanceof CliError ? err.exitCode : 1;
  }
}
