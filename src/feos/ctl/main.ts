/**
 * feosctl (docs/feos/feosctl.md): the command line of a node's feosd.
 *   feosctl [--socket PATH | --tcp ADDRESS] pod create|get|list|start|stop|delete|suspend|resume|hibernate|restore|events|exec|logs|port-forward ...
 *   feosctl [--socket PATH | --tcp ADDRESS] volume create|get|list|delete ...
 *   feosctl [--socket PATH | --tcp ADDRESS] host info
 *   feosctl [--socket PATH | --tcp ADDRESS] security-group|name-table put|get|list|delete ... (./network.ts)
 *   feosctl [--socket PATH | --tcp ADDRESS] traffic watch [--pod ID]... [-o json] (./traffic.ts)
 *   feosctl [--socket PATH | --tcp ADDRESS] mesh get [-o json|yaml] (./mesh.ts)
 *   feosctl --kubeconfig FILE --node NAME <any command>: through the cluster the node joined (./through-cluster.ts)
 * Every command prints a table, or with `-o json|yaml` the PodInfo (its `id` first). A gRPC error prints
 * as `feosctl: <CODE_NAME>: <message>` (with "(VmBusy)" when marked) and exits 1; bad usage (an unknown
 * flag or command, a missing argument, a bad value) prints what to fix on standard error and exits 1 too,
 * as kubectl does.
 *
 * This file is the program: its global flags and how it exits. The command groups are ./pod.ts,
 * ./pod-streams.ts, ./volume.ts, ./host.ts and ./network.ts; ./context.ts maps errors, ./output.ts prints,
 * ./flags.ts reads the flags' values.
 */
import { Command, InvalidArgumentError } from 'commander';
import { CallFailed, ctlContext } from './context.ts';
import { addHostCommands } from './host.ts';
import { addMeshCommands } from './mesh.ts';
import { addNetworkCommands } from './network.ts';
import { addTrafficCommands } from './traffic.ts';
import { type ClusterTunnel, openClusterTunnel } from './through-cluster.ts';
import { addPodCommands } from './pod.ts';
import { addVolumeCommands } from './volume.ts';

export { isConnectFailure } from './context.ts';

/** The exit code of a usage error: 1, as kubectl's (cobra's) and kube32-cli's. */
export const USAGE_EXIT_CODE = 1;

/** Runs feosctl with `argv` (process.argv). Exits the process with its status. */
/** feosctl's form of a kubectl verb a user types first (`feosctl get pods`): the noun comes first here. */
const KUBECTL_VERBS: Record<string, string> = {
  get: 'feosctl pod list [-o wide], feosctl pod get ID',
  describe: 'feosctl pod get ID [-o yaml]',
  logs: 'feosctl pod logs ID',
  exec: 'feosctl pod exec ID -- COMMAND',
  delete: 'feosctl pod delete ID',
  create: 'feosctl pod create',
  run: 'feosctl pod create --image REF',
  events: 'feosctl pod events [ID]',
};

/** Commander's `unknown command 'get'` with feosctl's form of that kubectl verb; other messages as they are. */
export function kubectlHabit(message: string): string {
  const m = /^error: unknown command '([a-z]+)'\n?$/.exec(message);
  const form = m ? KUBECTL_VERBS[m[1]!] : undefined;
  return form ? `error: unknown command '${m![1]}': feosctl puts the noun first (${form})\n` : message;
}

export async function main(argv: string[]): Promise<void> {
  // Whether commander printed its error itself (its parse errors); errors thrown by an action it does not print.
  let commanderSaid = false;
  const program = new Command('feosctl')
    .description("FeOS's command line: the pods of one node's feosd")
    .option('--socket <path>', "feosd's API socket", '/run/feos/api.sock')
    .option('--tcp <address>', "feosd's TCP address, host:port (instead of the socket)", (v: string) => {
      // Checked before any lookup: `--tcp nothing` asked the resolver for "nothing".
      const m = /^(?:\[[0-9A-Fa-f:.]+\]|[^:[\]\s]+):(\d{1,5})$/.exec(v);
      if (!m || Number(m[1]) < 1 || Number(m[1]) > 65535) throw new InvalidArgumentError(`--tcp ${JSON.stringify(v)}: want host:port or [IPv6]:port with a port from 1 to 65535`);
      return v;
    })
    .option('--kubeconfig <file>', 'with --node: the kubeconfig of the cluster the node joined (default $KUBECONFIG)')
    .option('--node <name>', "reach this FeOS node's API through the cluster of --kubeconfig (cluster admins only) instead of --socket")
    .option('--timeout <seconds>', 'deadline of each call', (v) => {
      const n = Number(v);
      if (!(n > 0)) throw new InvalidArgumentError(`want a positive number of seconds, got ${JSON.stringify(v)}`);
      return n;
    }, 600)
    .exitOverride()
    .configureOutput({
      writeErr: (s) => {
        commanderSaid = true;
        process.stderr.write(kubectlHabit(s));
      },
    });

  // --node: a loopback end of a tunnel through the cluster (./through-cluster.ts), opened before the command runs.
  let tunnel: ClusterTunnel | undefined;
  program.hook('preAction', async () => {
    const o = program.opts<{ kubeconfig?: string; node?: string; socket: string; tcp?: string }>();
    const kubeconfig = o.kubeconfig ?? process.env.KUBECONFIG?.split(':')[0];
    if (o.node === '') throw new InvalidArgumentError('--node "": want the name of a FeOS node of the cluster (kubectl get nodes -l kube32.io/runtime=feos)');
    if (o.node && !kubeconfig) throw new InvalidArgumentError('--node needs --kubeconfig (or $KUBECONFIG): the cluster the node joined');
    if (o.kubeconfig && o.node === undefined) throw new InvalidArgumentError('--kubeconfig is for --node NAME: the FeOS node to reach through the cluster');
    if (o.node && (o.tcp || program.getOptionValueSource('socket') === 'cli')) throw new InvalidArgumentError('--node reaches the node through the cluster: leave out --socket and --tcp');
    if (o.node) tunnel = await openClusterTunnel(kubeconfig!, o.node);
  });
  const ctx = ctlContext(program, () => tunnel);
  addPodCommands(program, ctx);
  addVolumeCommands(program, ctx);
  addNetworkCommands(program, ctx);
  addMeshCommands(program, ctx);
  addTrafficCommands(program, ctx);
  addHostCommands(program, ctx);

  try {
    await program.parseAsync(argv);
    tunnel?.close();
  } catch (err: unknown) {
    tunnel?.close();
    if (err instanceof CallFailed) {
      process.stderr.write(`feosctl: ${err.message}\n`);
      process.exit(1);
    }
    const e = err as { code?: string; exitCode?: number; message?: string };
    if (typeof e.code === 'string' && e.code.startsWith('commander.')) {
      // An InvalidArgumentError thrown by an action (not by commander's parsing) was not printed.
      if (e.exitCode !== 0 && !commanderSaid) process.stderr.write(`feosctl: ${(e.message ?? '').replace(/^error: /, '')}\n`);
      process.exit(e.exitCode === 0 ? 0 : USAGE_EXIT_CODE);
    }
    process.stderr.write(`feosctl: ${e.message ?? String(err)}\n`);
    process.exit(1);
  }
}
