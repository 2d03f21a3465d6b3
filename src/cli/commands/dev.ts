/**
 * `kube32-cli dev MODULE.wasm`: runs one pod on this computer, serving its HTTP on a port as a node
 * would (pod-abi.md; issue 3, "For pod authors"). A pod author's edit-run loop, and the way to try
 * a snapshot by hand: with `--save-on-exit FILE`, SIGINT or SIGTERM freezes the pod and writes its
 * K32S snapshot; `--restore FILE` starts from one. Owned by src/wasm.
 *
 * Standard output carries the pod's log lines; standard error the runner's own messages, among them
 * `serving <name> on http://HOST:PORT` once the pod is ready (tests read the port from it).
 *
 * This file holds the flags and help; the code, and the WebAssembly runtime with it, is loaded only
 * when `dev` runs (../actions/dev.ts).
 */
import type { Command } from 'commander';
import type { DevFlags } from '../actions/dev.ts';

/** Commander's parser for a repeatable option: each use adds its value to the list. */
function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

/** Adds this file's commands to `program`. */
export function register(program: Command): void {
  program
    .command('dev')
    .description('Run one pod on this computer, serving its HTTP as a node would')
    .argument('<module>', 'the pod\'s WebAssembly module (.wasm)')
    .option('-p, --port <port>', 'port to serve the pod\'s HTTP on (0: any free port)', '8080')
    .option('--address <address>', 'address to listen on', '127.0.0.1')
    .option('-e, --env <KEY=VALUE>', 'an environment variable of the container (repeatable)', collect, [])
    .option('--tick-interval <duration>', 'call k32_tick at this interval, as the annotation kube32.io/tick-interval (500ms, 1s)')
    .option('--topics <a,b>', 'topics the pod subscribes to, as kube32.io/topics; its channel sends on them come back as events')
    .option('--memory-limit <quantity>', 'the pod\'s memory limit, as resources.limits.memory (64Ki, 16Mi)', '16Mi')
    .option('--restore <file>', 'start from this K32S snapshot instead of afresh')
    .option('--save-on-exit <file>', 'on SIGINT or SIGTERM, freeze the pod and write its K32S snapshot here')
    .option('--fs-dir <dir>', 'the pod\'s storage for k32_fs (default: a temporary directory, removed at exit)')
    .option('--fs-limit <quantity>', 'most bytes the pod\'s files may hold, as resources.limits.ephemeral-storage (a write past it gets -ENOSPC; default: no limit)')
    .option('--name <name>', 'the pod\'s name (default: the module\'s file name)')
    .option('--freeze-timeout <duration>', 'how long the current call may take to return when freezing', '10s')
    .action(async (file: string, flags: DevFlags) => {
      const { dev } = await import('../actions/dev.ts');
      await dev(file, flags);
    });
}
