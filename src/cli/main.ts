/**
 * kube32-cli: the command line of Kube32. Each command lives in `commands/<name>.ts` and exports
 * `register(program)`; this file only assembles them and maps errors to exit codes the way kubectl
 * does (1 for a failed command, with the message on standard error).
 *
 * Start-up time: a command file is imported only when the command line needs it. `kube32-cli push ...`
 * loads `commands/workloads.ts` alone, and a command file loads its implementation only when its action
 * runs, so that neither the Kubernetes client nor the API server and controllers are loaded for a
 * command that does not use them. Without a known command (`--help`, `help`, a typo), every command
 * file is loaded so that the help lists them all and commander can suggest the nearest name.
 */
import { Command, CommanderError } from 'commander';
import { CliError } from './errors.ts';

/** A command file: the commands it registers, and how to load it. */
interface CommandModule {
  commands: readonly string[];
  load: () => Promise<{ register(program: Command): void }>;
}

/** Every command file, in the order the help lists them. */
const COMMAND_MODULES: readonly CommandModule[] = [
  { commands: ['snapshot'], load: () => import('./commands/snapshot.ts') },
  { commands: ['dev'], load: () => import('./commands/dev.ts') },
  { commands: ['apiserver'], load: () => import('./commands/apiserver.ts') },
  { commands: ['control-plane'], load: () => import('./commands/control-plane.ts') },
  { commands: ['up', 'down'], load: () => import('./commands/cluster.ts') },
  { commands: ['push', 'move', 'checkpoint'], load: () => import('./commands/workloads.ts') },
  { commands: ['feos'], load: () => import('./commands/feos.ts') },
  { commands: ['kubeconfig'], load: () => import('./commands/kubeconfig.ts') },
];

/**
 * The command a command line names: its first word that is not an option (commander's own
 * `help COMMAND` names the word after `help`), or undefined when there is none.
 * @param args the arguments after the executable and the script
 */
function commandWord(args: readonly string[]): string | undefined {
  const words = args.filter((a) => !a.startsWith('-'));
  return words[0] === 'help' ? words[1] : words[0];
}

/**
 * Builds the command tree; exported for tests.
 * @param args the arguments after the executable and the script (`process.argv.slice(2)`): only the
 *   command file they name is loaded; absent or naming no known command, every command file is
 */
export async function buildProgram(args?: readonly string[]): Promise<Command> {
  const program = new Command('kube32-cli')
    .description('Kube32: a Kubernetes-compatible cluster whose pods are WebAssembly modules that move with their state')
    .version('0.1.0')
    .showHelpAfterError()
    .exitOverride();
  const word = args === undefined ? undefined : commandWord(args);
  const named = COMMAND_MODULES.filter((m) => word !== undefined && m.commands.includes(word));
  const modules = await Promise.all((named.length > 0 ? named : COMMAND_MODULES).map((m) => m.load()));
  for (const m of modules) m.register(program);
  return program;
}

/**
 * Runs the CLI with `argv` as `process.argv` gives it. Exits non-zero with a one-line message on
 * any error; commands that want another exit code throw a `CliError`.
 */
export async function main(argv: string[]): Promise<void> {
  // A reader that went away (`kube32-cli move ... -o json | head`): stop quietly, as a command line
  // killed by SIGPIPE does, instead of an unhandled EPIPE with its stack. A command that keeps
  // running without its output (`up`, see resilientPrinter) takes the error itself.
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (stream.listenerCount('error') > 1) return;
      process.exit(err.code === 'EPIPE' ? Number(process.exitCode ?? 0) : 1);
    });
  }
  const program = await buildProgram(argv.slice(2));
  try {
    await program.parseAsync(argv);
  } catch (err: unknown) {
    if (err instanceof CommanderError) {
      // commander already printed its message (or the help/version text).
      process.exitCode = err.exitCode;
      return;
    }
    // An API refusal in kubectl's words; the client is loaded only then (start-up time, see above).
    const message =
      err instanceof Error && err.name === 'ApiError' ? (await import('./api-client.ts')).kubectlMessage(err as never) : err instanceof Error ? err.message : String(err);
    // kubectl prints a server's refusal bare (`Error from server (NotFound): ...`), its other errors after `error: `.
    process.stderr.write(message.startsWith('error: ') || message.startsWith('Error from server') ? `${message}\n` : `error: ${message}\n`);
    process.exitCode = err instanceof CliError ? err.exitCode : 1;
  }
}
