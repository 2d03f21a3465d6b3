/**
 * What kube32-cli checks of a pod before it creates a Checkpoint for it (seed "Checkpoint objects and
 * data": a Save or Move acts on a running pod's container on its node), so that a request that cannot
 * succeed is refused with the reason before anything is created.
 */
import { apiJson } from '../api-client.ts';
import { CliError } from '../errors.ts';
import type { ClusterTarget } from '../kubeconfig.ts';

/** A core/v1 Pod, the fields read here. */
interface PodObject {
  metadata?: { name?: string; deletionTimestamp?: string };
  spec?: { nodeName?: string; containers?: { name: string }[] };
  status?: { phase?: string };
}

/** A pod that a Checkpoint can act on. */
export interface RunningPod {
  /** The node it runs on. */
  nodeName: string;
  /** Its containers' names, in spec order. */
  containers: string[];
}

/**
 * Refuses an empty pod name as kubectl does (`resource name may not be empty`): the pod's URL would
 * then be the pods list, read as a pod that is "Pending and not bound to a node yet".
 * @throws CliError for a name that is empty or blank
 */
export function requirePodName(name: string): void {
  if (name.trim() === '') throw new CliError('resource name may not be empty');
}

/**
 * Reads pod `name` in the target's namespace and checks that it is Running on a node, is not being
 * deleted, and has `container` when one is named.
 * @param verb what the caller is about to do, for the messages (`move`, `checkpoint`)
 * @throws ApiError with kubectl's message when the pod does not exist (`pods "x" not found`)
 * @throws CliError naming the pod's phase, or the containers it has
 */
export async function runningPod(target: ClusterTarget, name: string, verb: string, container?: string): Promise<RunningPod> {
  const pod = await apiJson<PodObject>(target.kubeConfig, {
    path: `/api/v1/namespaces/${encodeURIComponent(target.namespace)}/pods/${encodeURIComponent(name)}`,
  });
  const phase = pod.status?.phase ?? 'Pending';
  const nodeName = pod.spec?.nodeName ?? '';
  if (pod.metadata?.deletionTimestamp) {
    throw new CliError(`pod ${name} is being deleted: there is nothing left to ${verb}`);
  }
  if (phase !== 'Running' || !nodeName) {
    const where = nodeName ? ` on node ${nodeName}` : ' and not bound to a node yet';
    throw new CliError(`pod ${name} is ${phase}${where}: only a Running pod can ${verb} (see kubectl describe pod ${name})`);
  }
  const containers = (pod.spec?.containers ?? []).map((c) => c.name);
  if (container !== undefined && !containers.includes(container)) {
    throw new CliError(
      `container "${container}" is not valid for pod ${name}: ${containers.length > 0 ? `its containers are ${containers.join(', ')}` : 'it has no containers'}`,
    );
  }
  return { nodeName, containers };
}

/** Where human progress goes: standard error when standard output carries `-o json|yaml|name`. */
export function progress(machine: boolean): (line: string) => void {
  return (line) => (machine ? process.stderr : process.stdout).write(`${line}\n`);
}
