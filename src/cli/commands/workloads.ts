/**
 * kube32-cli commands on a cluster's workloads (seed "Moves", "Checkpoint objects and data"):
 *
 * - `push FILE.wasm [--name NAME]`: stores a module in the cluster's module store
 *   (`PUT /apis/kube32.io/v1/modules/<name>/data`), so pods can name it `wasm://NAME`; prints its digest.
 * - `move POD [--to NODE]`: creates a Move Checkpoint, follows it to Completed or Failed and prints the
 *   outcome with the time from the freeze (the Moved event's message); exit 1 with the blockers on a refusal.
 * - `checkpoint POD`: creates a Save Checkpoint and follows it to Saved; the pod keeps running.
 *
 * All take `--kubeconfig`, `--context`, `-n/--namespace` and `-o json|yaml|name` as kubectl does.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import type { Command } from 'commander';
import { kubectlAction } from '../action.ts';
import { apiJson } from '../api-client.ts';
import {
  type Checkpoint,
  checkpointName,
  checkpointsPath,
  findPodEvent,
  followCheckpoint,
} from '../checkpoints.ts';
import { CliError } from '../errors.ts';
import { type ClusterFlags, type ClusterTarget, addClusterFlags, loadClusterTarget } from '../kubeconfig.ts';
import { formatObject, formatSize, outputOption, parseOutputFormat } from '../output.ts';
import { parseWaitTimeout } from '../wait.ts';

/** A kube32.io/v1 Module as the module store answers it. */
interface Module {
  apiVersion: string;
  kind: 'Module';
  metadata: { name: string };
  spec?: { sha256?: string; sizeBytes?: number };
}

interface PushFlags extends ClusterFlags {
  name?: string;
  output?: string;
}

interface MoveFlags extends ClusterFlags {
  to?: string;
  container?: string;
  timeout: string;
  wait: boolean;
  output?: string;
}

interface CheckpointFlags extends ClusterFlags {
  container?: string;
  name?: string;
  timeout: string;
  wait: boolean;
  output?: string;
}

/** An object name as Kubernetes takes it: a DNS-1123 subdomain. */
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** The first bytes of every WebAssembly binary module: `\0asm`, version 1. */
const WASM_MAGIC = Buffer.from([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]);

/** Where human progress goes: standard error when standard output carries `-o json|yaml|name`. */
function progress(machine: boolean): (line: string) => void {
  return (line) => (machine ? process.stderr : process.stdout).write(`${line}\n`);
}

async function push(file: string, flags: PushFlags): Promise<void> {
  const format = parseOutputFormat(flags.output);
  const name = flags.name ?? basename(file).replace(/\.wasm$/, '');
  if (!DNS1123_SUBDOMAIN.test(name) || name.length > 253) {
    throw new CliError(
      `invalid module name "${name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character${flags.name ? '' : ' (pass --name)'}`,
    );
  }
  let bytes: Buffer;
  try {
    bytes = await readFile(file);
  } catch (err: unknown) {
    const code = (err as { code?: string }).code;
    throw new CliError(code === 'ENOENT' ? `the path "${file}" does not exist` : `${file}: ${(err as Error).message}`, 1, {
      cause: err,
    });
  }
  if (bytes.length < 8 || !bytes.subarray(0, 8).equals(WASM_MAGIC)) {
    throw new CliError(`${file} is not a WebAssembly binary module (it does not start with \\0asm, version 1)`);
  }
  const digest = createHash('sha256').update(bytes).digest('hex');
  const { kubeConfig } = loadClusterTarget(flags);
  const module = await apiJson<Module>(kubeConfig, {
    method: 'PUT',
    path: `/apis/kube32.io/v1/modules/${encodeURIComponent(name)}/data`,
    body: bytes,
    contentType: 'application/octet-stream',
  });
  const stored = module.spec?.sha256;
  if (stored && stored !== digest) {
    throw new CliError(`the cluster stored module ${name} with digest sha256:${stored}, but ${file} has sha256:${digest}`);
  }
  if (format) {
    process.stdout.write(formatObject(module, format, 'module.kube32.io'));
    return;
  }
  process.stdout.write(`module.kube32.io/${name} pushed: sha256:${digest} (${formatSize(bytes.length)}); image: wasm://${name}\n`);
}

/** Checks that the pod exists (kubectl's NotFound message otherwise) and returns its node. */
async function podNode(kc: ClusterTarget, pod: string): Promise<string> {
  const obj = await apiJson<{ spec?: { nodeName?: string } }>(kc.kubeConfig, {
    path: `/api/v1/namespaces/${encodeURIComponent(kc.namespace)}/pods/${encodeURIComponent(pod)}`,
  });
  return obj.spec?.nodeName ?? '';
}

function reportFailure(ckpt: Checkpoint, what: string): never {
  const blockers = ckpt.status?.blockers ?? [];
  const lines = [`${what}: ${ckpt.status?.message || 'the checkpoint failed'}`];
  if (blockers.length > 0) lines.push('blockers:', ...blockers.map((b) => `  - ${b}`));
  throw new CliError(lines.join('\n'));
}

async function move(pod: string, flags: MoveFlags): Promise<void> {
  const format = parseOutputFormat(flags.output);
  const say = progress(format !== '');
  const timeoutMs = parseWaitTimeout(flags.timeout);
  const target = loadClusterTarget(flags);
  const kc = target.kubeConfig;
  const from = await podNode(target, pod);
  if (flags.to) {
    await apiJson(kc, { path: `/api/v1/nodes/${encodeURIComponent(flags.to)}` });
    if (flags.to === from) throw new CliError(`pod ${pod} already runs on node ${flags.to}: a move goes to another node`);
  }
  const body: Checkpoint = {
    apiVersion: 'kube32.io/v1',
    kind: 'Checkpoint',
    metadata: { name: checkpointName(pod, 'move'), namespace: target.namespace },
    spec: {
      podName: pod,
      action: 'Move',
      ...(flags.container ? { containerName: flags.container } : {}),
      ...(flags.to ? { target: { nodeName: flags.to } } : {}),
    },
  };
  const started = Date.now();
  const created = await apiJson<Checkpoint>(kc, { method: 'POST', path: checkpointsPath(target.namespace), body });
  const name = created.metadata.name;
  say(`checkpoint.kube32.io/${name} created: moving pod/${pod} from ${from || 'its node'} to ${flags.to ?? 'the node the scheduler picks'}`);
  if (!flags.wait) {
    if (format) process.stdout.write(formatObject(created, format, 'checkpoint.kube32.io'));
    return;
  }
  const signal = timeoutMs > 0 ? AbortSignal.timeout(timeoutMs) : new AbortController().signal;
  const done = await followCheckpoint(kc, target.namespace, name, signal, (c) => {
    const s = c.status ?? {};
    const where =
      (s.phase === 'Moving' || s.phase === 'Completed') && s.targetNode ? ` to ${s.targetNode}` : s.nodeName ? ` on ${s.nodeName}` : '';
    say(`  ${((Date.now() - started) / 1000).toFixed(1)}s  ${s.phase ?? 'Pending'}${where}`);
  });
  if (format) process.stdout.write(formatObject(done, format, 'checkpoint.kube32.io'));
  if (done.status?.phase === 'Failed') reportFailure(done, `pod/${pod} did not move`);
  const newPod = done.status?.newPodName ?? pod;
  // The Moved event is recorded once the replacement runs; the checkpoint may turn Completed just before it.
  let moved = await findPodEvent(kc, target.namespace, newPod, 'Moved', started);
  const eventDeadline = Date.now() + 5000;
  while (!moved && Date.now() < eventDeadline) {
    await new Promise((r) => setTimeout(r, 200)); // poll with a deadline: events have no watchable "ready" state
    moved = await findPodEvent(kc, target.namespace, newPod, 'Moved', started);
  }
  // The event's message names the time from the freeze ("... in 550 ms from the freeze to Running").
  const freeze = moved?.message?.match(/in ([\d.]+ ?(?:ms|s)) from the freeze/)?.[1];
  const detail = freeze ? `in ${freeze} from the freeze` : moved?.message ? `(${moved.message})` : '(no Moved event: time from the freeze unknown)';
  say(`pod/${newPod} moved from ${done.status?.nodeName ?? from} to ${done.status?.targetNode ?? 'another node'} ${detail} (checkpoint ${name})`);
}

async function checkpoint(pod: string, flags: CheckpointFlags): Promise<void> {
  const format = parseOutputFormat(flags.output);
  const say = progress(format !== '');
  const timeoutMs = parseWaitTimeout(flags.timeout);
  const target = loadClusterTarget(flags);
  const kc = target.kubeConfig;
  const node = await podNode(target, pod);
  const name = flags.name ?? checkpointName(pod, 'save');
  if (!DNS1123_SUBDOMAIN.test(name) || name.length > 253) throw new CliError(`invalid checkpoint name "${name}"`);
  const body: Checkpoint = {
    apiVersion: 'kube32.io/v1',
    kind: 'Checkpoint',
    metadata: { name, namespace: target.namespace },
    spec: { podName: pod, action: 'Save', ...(flags.container ? { containerName: flags.container } : {}) },
  };
  const created = await apiJson<Checkpoint>(kc, { method: 'POST', path: checkpointsPath(target.namespace), body });
  say(`checkpoint.kube32.io/${created.metadata.name} created: saving pod/${pod} on ${node || 'its node'}`);
  if (!flags.wait) {
    if (format) process.stdout.write(formatObject(created, format, 'checkpoint.kube32.io'));
    return;
  }
  const signal = timeoutMs > 0 ? AbortSignal.timeout(timeoutMs) : new AbortController().signal;
  const done = await followCheckpoint(kc, target.namespace, created.metadata.name, signal);
  if (format) process.stdout.write(formatObject(done, format, 'checkpoint.kube32.io'));
  if (done.status?.phase === 'Failed') reportFailure(done, `pod/${pod} was not checkpointed`);
  const s = done.status ?? {};
  say(
    `checkpoint.kube32.io/${done.metadata.name} saved: ${s.sizeBytes !== undefined ? formatSize(s.sizeBytes) : 'size unknown'} from ${s.nodeName ?? node}, pod clock ${s.podTimeMs ?? '?'} ms, snapshot sha256:${s.snapshotSha256 ?? '?'}`,
  );
}

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
  ).action(kubectlAction(push));

  addClusterFlags(
    program
      .command('move')
      .summary('Move a running pod to another node with its state')
      .description(
        'Create a Move Checkpoint for POD and wait for its end. The pod freezes, its state goes to the target node, and it goes on there with its memory, globals, tables, clock and channels. Without --to the scheduler picks the node. Exit status 1 when the move is refused or rolled back; the blockers are listed.',
      )
      .argument('<pod>', 'the pod to move')
      .option('--to <node>', 'the node to move it to (default: the scheduler picks)')
      .option('-c, --container <name>', 'the container (default: the only one)')
      .option('--timeout <duration>', 'how long to wait for the end of the move (0: forever)', '2m')
      .option('--no-wait', 'return once the Checkpoint is created')
      .addOption(outputOption()),
  ).action(kubectlAction(move));

  addClusterFlags(
    program
      .command('checkpoint')
      .summary("Save a pod's state without moving it")
      .description(
        "Create a Save Checkpoint for POD and wait until it is Saved. The pod freezes for the snapshot and keeps running where it is. The snapshot is the Checkpoint's data (GET .../checkpoints/NAME/data).",
      )
      .argument('<pod>', 'the pod to checkpoint')
      .option('-c, --container <name>', 'the container (default: the only one)')
      .option('--name <name>', 'the Checkpoint name (default: <pod>-save-<random>)')
      .option('--timeout <duration>', 'how long to wait for the snapshot (0: forever)', '1m')
      .option('--no-wait', 'return once the Checkpoint is created')
      .addOption(outputOption()),
  ).action(kubectlAction(checkpoint));
}
