/**
 * `kube32-cli checkpoint POD`: creates a Save Checkpoint and follows it to Saved; the pod keeps running
 * (seed "Checkpoint objects and data"). Loaded only when `checkpoint` runs (see ../commands/workloads.ts).
 */
import { kubectlAction } from '../action.ts';
import { apiJson } from '../api-client.ts';
import { type Checkpoint, checkpointName, checkpointsPath, followCheckpoint, reportFailure } from '../checkpoints.ts';
import { CliError } from '../errors.ts';
import type { ClusterFlags } from '../flags.ts';
import { loadClusterTarget } from '../kubeconfig.ts';
import { dnsSubdomainProblem } from '../names.ts';
import { formatObject, formatSize, parseOutputFormat } from '../output.ts';
import { parseWaitTimeout } from '../wait.ts';
import { progress, requirePodName, runningPod } from './pods.ts';

/** `checkpoint`'s flags as commander parses them. */
export interface CheckpointFlags extends ClusterFlags {
  container?: string;
  name?: string;
  timeout: string;
  wait: boolean;
  output?: string;
}

/**
 * Runs `checkpoint`.
 * @throws CliError before anything is created for a bad `--name` or `--timeout`, a pod that is not
 *   Running on a node, or an unknown container; after, when the Checkpoint fails (its blockers listed)
 *   or the wait times out
 */
export const checkpoint = kubectlAction(async function checkpoint(pod: string, flags: CheckpointFlags): Promise<void> {
  requirePodName(pod);
  const format = parseOutputFormat(flags.output);
  const say = progress(format !== '');
  const timeoutMs = parseWaitTimeout(flags.timeout);
  // A --name is checked before anything else; a name made from the pod's only once the pod is found (a pod
  // that does not exist, such as "Bad_Name!", is reported as NotFound, not as a name the user never gave).
  const nameProblem = (name: string) => {
    const problem = dnsSubdomainProblem(name);
    if (problem) throw new CliError(`invalid checkpoint name "${name}": ${problem}`);
  };
  if (flags.name !== undefined) nameProblem(flags.name);
  const target = loadClusterTarget(flags);
  const kc = target.kubeConfig;
  const { nodeName } = await runningPod(target, pod, 'be checkpointed', flags.container);
  const name = flags.name ?? checkpointName(pod, 'save');
  nameProblem(name);
  const body: Checkpoint = {
    apiVersion: 'kube32.io/v1',
    kind: 'Checkpoint',
    metadata: { name, namespace: target.namespace },
    spec: { podName: pod, action: 'Save', ...(flags.container ? { containerName: flags.container } : {}) },
  };
  const created = await apiJson<Checkpoint>(kc, { method: 'POST', path: checkpointsPath(target.namespace), body });
  say(`checkpoint.kube32.io/${created.metadata.name} created: saving pod/${pod} on ${nodeName}`);
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
    `checkpoint.kube32.io/${done.metadata.name} saved: ${s.sizeBytes !== undefined ? formatSize(s.sizeBytes) : 'size unknown'} from ${s.nodeName ?? nodeName}, pod clock ${s.podTimeMs ?? '?'} ms, snapshot sha256:${s.snapshotSha256 ?? '?'}`,
  );
});
