/**
 * `kube32-cli move POD [--to NODE]`: creates a Move Checkpoint, follows it to Completed or Failed and
 * prints the outcome with the time from the freeze (the Moved event's message); exit 1 with the blockers
 * on a refusal (seed "Moves"). What the CLI can know is checked before the Checkpoint is created: the pod
 * is Running on a node, the container exists, and `--to` names an existing node other than the pod's.
 * Loaded only when `move` runs (see ../commands/workloads.ts for its flags).
 */
import { kubectlAction } from '../action.ts';
import { apiJson } from '../api-client.ts';
import { type Checkpoint, checkpointName, checkpointsPath, findPodEvent, followCheckpoint, reportFailure } from '../checkpoints.ts';
import { CliError } from '../errors.ts';
import type { ClusterFlags } from '../flags.ts';
import { loadClusterTarget } from '../kubeconfig.ts';
import { formatObject, parseOutputFormat } from '../output.ts';
import { parseWaitTimeout } from '../wait.ts';
import { progress, requirePodName, runningPod } from './pods.ts';

/** `move`'s flags as commander parses them. */
export interface MoveFlags extends ClusterFlags {
  to?: string;
  container?: string;
  timeout: string;
  wait: boolean;
  output?: string;
}

/**
 * Runs `move`.
 * @throws CliError before anything is created for an empty `--to`, a bad `--timeout`, a pod that is not
 *   Running on a node, an unknown container, or `--to` naming the pod's own node; ApiError (kubectl's
 *   NotFound) for a missing pod or node; after, when the move fails (its blockers listed) or the wait
 *   times out
 */
export const move = kubectlAction(async function move(pod: string, flags: MoveFlags): Promise<void> {
  requirePodName(pod);
  const format = parseOutputFormat(flags.output);
  const say = progress(format !== '');
  const timeoutMs = parseWaitTimeout(flags.timeout);
  const to = flags.to?.trim();
  if (to === '') throw new CliError('--to needs a node name: pass --to NODE, or leave --to out to let the scheduler pick the node');
  const target = loadClusterTarget(flags);
  const kc = target.kubeConfig;
  const { nodeName: from } = await runningPod(target, pod, 'move', flags.container);
  if (to !== undefined) {
    await apiJson(kc, { path: `/api/v1/nodes/${encodeURIComponent(to)}` });
    if (to === from) throw new CliError(`pod ${pod} already runs on node ${to}: a move goes to another node`);
  }
  const body: Checkpoint = {
    apiVersion: 'kube32.io/v1',
    kind: 'Checkpoint',
    metadata: { name: checkpointName(pod, 'move'), namespace: target.namespace },
    spec: {
      podName: pod,
      action: 'Move',
      ...(flags.container ? { containerName: flags.container } : {}),
      ...(to ? { target: { nodeName: to } } : {}),
    },
  };
  const started = Date.now();
  const created = await apiJson<Checkpoint>(kc, { method: 'POST', path: checkpointsPath(target.namespace), body });
  const name = created.metadata.name;
  say(`checkpoint.kube32.io/${name} created: moving pod/${pod} from ${from} to ${to ?? 'the node the scheduler picks'}`);
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
});
