/**
 * kube32-cli commands on a cluster's workloads (seed "Moves", "Checkpoint objects and data"): their
 * flags and help. Each command's code is loaded only when it runs (`../actions/<command>.ts`), so that
 * `--help` and the other commands start without loading the Kubernetes client.
 *
 * - `push FILE.wasm [--name NAME]`: stores a module in the cluster's module store, so pods can name it
 *   `wasm://NAME`; prints its digest.
 * - `move POD [--to NODE]`: creates a Move Checkpoint, follows it to Completed or Failed and prints the
 *   outcome with the time from the freeze; exit 1 with the blockers on a refusal.
 * - `checkpoint POD`: creates a Save Checkpoint and follows it to Saved; the pod keeps running.
 *
 * All take `--kubeconfig`, `--context`, `-n/--namespace` and `-o json|yaml|name` as kubectl does.
 */
import type { Command } from 'commander';
import type { CheckpointFlags } from '../actions/checkpoint.ts';
import type { MoveFlags } from '../actions/move.ts';
import type { PushFlags } from '../actions/push.ts';
import { addClusterFlags, outputOption } from '../flags.ts';

/** Adds `push`, `move` and `checkpoint` to `program`. */
export function register(program: Command): void {
  addClusterFlags(
    program
      .command('push')
      .summary('Store a WebAssembly module so that pods can name it wasm://NAME')
      .description(
        'Store FILE.wasm in the cluster\'s module store (kube32.io/v1 Module NAME) and print its SHA-256 digest. Pods then run it with "image: wasm://NAME". Pushing again under the same name replaces the module for pods started later.',
      )
      .argument('<file>', 'a WebAssembly binary module (.wasm)')
      .option('--name <name>', 'the module name (default: the file name without .wasm)')
      .addOption(outputOption()),
    false,
  ).action(async (file: string, flags: PushFlags) => (await import('../actions/push.ts')).push(file, flags));

  addClusterFlags(
    program
      .command('move')
      .summary('Move a running pod to another node with its state')
      .description(
        'Create a Move Checkpoint for POD and wait for its end. The pod freezes, its state goes to the target node, and it goes on there with its memory, globals, tables, clock and channels. Without --to the scheduler picks the node. The pod must be Running on a node; --to must name another node. Exit status 1 when the move is refused or rolled back; the blockers are listed.',
      )
      .argument('<pod>', 'the pod to move')
      .option('--to <node>', 'the node to move it to (default: the scheduler picks)')
      .option('-c, --container <name>', 'the container (default: the only one)')
      .option('--timeout <duration>', 'how long to wait for the end of the move (0: forever)', '2m')
      .option('--no-wait', 'return once the Checkpoint is created')
      .addOption(outputOption()),
  ).action(async (pod: string, flags: MoveFlags) => (await import('../actions/move.ts')).move(pod, flags));

  addClusterFlags(
    program
      .command('checkpoint')
      .summary("Save a pod's state without moving it")
      .description(
        "Create a Save Checkpoint for POD and wait until it is Saved. The pod freezes for the snapshot and keeps running where it is. The snapshot is the Checkpoint's data (GET .../checkpoints/NAME/data).",
      )
      .argument('<pod>', 'the pod to checkpoint')
      .option('-c, --container <name>', 'the container (default: the only one)')
      .option('--name <name>', 'the Checkpoint name, a lowercase RFC 1123 subdomain (default: <pod>-save-<random>)')
      .option('--timeout <duration>', 'how long to wait for the snapshot (0: forever)', '1m')
      .option('--no-wait', 'return once the Checkpoint is created')
      .addOption(outputOption()),
  ).action(async (pod: string, flags: CheckpointFlags) => (await import('../actions/checkpoint.ts')).checkpoint(pod, flags));
}
