/**
 * The flags that several kube32-cli commands share, as commander options, with kubectl's help texts.
 * This file is loaded to build the command tree (every `--help`), so it imports nothing heavier than
 * commander: the code that acts on the flags lives in `kubeconfig.ts` and `output.ts`.
 */
import { type Command, InvalidArgumentError, Option } from 'commander';

/** The flags every cluster command takes, as commander parses them. */
export interface ClusterFlags {
  /** `--kubeconfig FILE` */
  kubeconfig?: string;
  /** `--context NAME` */
  context?: string;
  /** `-n/--namespace NS` */
  namespace?: string;
}

/**
 * Adds `--kubeconfig`, `--context` and `-n/--namespace` to `command`, with kubectl's help texts.
 * @param namespaced false for commands on cluster-scoped objects (`push`): no `-n`
 * @returns the same command, for chaining
 */
export function addClusterFlags(command: Command, namespaced = true): Command {
  command
    .option('--kubeconfig <file>', 'Path to the kubeconfig file to use for CLI requests.')
    .option('--context <name>', 'The name of the kubeconfig context to use');
  if (namespaced) command.option('-n, --namespace <namespace>', 'If present, the namespace scope for this CLI request');
  return command;
}

/** The `-o, --output` option, with kubectl's wording. */
export function outputOption(): Option {
  return new Option('-o, --output <format>', 'Output format. One of: (json, yaml, name).');
}

/**
 * Commander's parser of a `--data-dir` value: any path but an empty one. `--data-dir "$DIR"` with `DIR`
 * unset gave "", which resolved to the current directory: `up` wrote a whole cluster there (kube32.db,
 * pki/, kubeconfig, logs/, nodes/), and the API server and control plane took "" for no data dir at all.
 * @throws InvalidArgumentError (commander: `option '--data-dir <dir>' argument '' is invalid. ...`)
 */
export function dataDirFlag(value: string): string {
  if (value.trim() === '') throw new InvalidArgumentError('the data dir must be a path (an empty one would be the current directory)');
  return value;
}
