/**
 * What Kube32 does differently, said where a user looks first: at the head of a field's description
 * in OpenAPI v3, so `kubectl explain job.spec` says it beside the field. The fields stay in the
 * schema (kubectl validates a manifest against it, and kube-apiserver's clients send them), and the
 * API server refuses them as it says here (registry/batch `validateJobSpec`); the test that reads
 * these notes with kubectl also checks that each field is refused. A container's probes, hooks,
 * command and args are kept but not run: their notes say so (test/apiserver/pod-modules.test.ts).
 */

/** Said of a field the API server refuses, for a user who sets it: what happens, and what to do instead. */
const refused = (what: string): string => `Not supported by Kube32: a Job (or a CronJob's jobTemplate) that sets it is refused (422 Invalid). ${what}`;

/** Said of a pod's containers: the API server pins one module a pod (registry/modules/images.ts). */
const ONE_MODULE =
  "Kube32 runs one WebAssembly module a pod: every container's image must name the same module (wasm://NAME, a pushed NAME, or kube32.io/wasm-sha256:<hex>); a pod whose containers name two is refused (422 Invalid).";

/** Said of a container's probes, which the kubelet keeps but never runs (src/kubelet has no prober). */
const NO_PROBES = 'Kept but not run by Kube32: the kubelet runs no probes, and a container is Ready while its module runs.';

/** Said of a container's command and args (docs/controllers.md, Jobs). */
const NO_PROCESS = 'Kept but not run by Kube32: a module has no processes and no command line. Give it settings with env (k32_env) or a ConfigMap volume (k32_asset).';

/**
 * Kube32's note on a field, by `schema#field` (`io.k8s.api.batch.v1.JobSpec#podFailurePolicy`): put
 * before kube-apiserver's description, a blank line between.
 */
export const KUBE32_NOTES: Readonly<Record<string, string>> = {
  'io.k8s.api.core.v1.PodSpec#containers': ONE_MODULE,
  'io.k8s.api.core.v1.Container#livenessProbe': NO_PROBES,
  'io.k8s.api.core.v1.Container#readinessProbe': NO_PROBES,
  'io.k8s.api.core.v1.Container#startupProbe': NO_PROBES,
  'io.k8s.api.core.v1.Container#lifecycle': 'Kept but not run by Kube32: the kubelet runs no postStart or preStop hooks (a module has no processes to exec). A module may export k32_init, which runs once when it starts.',
  'io.k8s.api.core.v1.Container#command': NO_PROCESS,
  'io.k8s.api.core.v1.Container#args': NO_PROCESS,
  'io.k8s.api.core.v1.PodSpec#initContainers':
    'Not supported by Kube32: a pod that has init containers is refused (422 Invalid), since they would not run. Do that work in the module (its k32_init runs once, when it starts) or in a Job that runs first.',
  'io.k8s.api.batch.v1.JobSpec#completionMode': 'Kube32 runs NonIndexed Jobs only: a Job with completionMode Indexed is refused (422 Invalid).',
  'io.k8s.api.batch.v1.JobSpec#podFailurePolicy': refused('Every failed pod counts towards backoffLimit.'),
  'io.k8s.api.batch.v1.JobSpec#successPolicy': refused('A Job succeeds when `completions` of its pods have succeeded (or, without completions, one has).'),
  'io.k8s.api.batch.v1.JobSpec#backoffLimitPerIndex': refused('Kube32 runs NonIndexed Jobs only: use backoffLimit.'),
  'io.k8s.api.batch.v1.JobSpec#maxFailedIndexes': refused('Kube32 runs NonIndexed Jobs only: use backoffLimit.'),
  'io.k8s.api.batch.v1.JobSpec#managedBy': refused("Kube32's own job controller manages every Job."),
  'io.k8s.api.batch.v1.CronJobSpec#timeZone':
    "Without one, Kube32 reads the schedule in UTC (the controllers' zone is not used). The name must be spelled as the IANA database spells it (Europe/Paris, not europe/paris).",
  'io.k8s.api.batch.v1.JobStatus#completedIndexes': 'Never set by Kube32, which runs NonIndexed Jobs only.',
  'io.k8s.api.batch.v1.JobStatus#failedIndexes': 'Never set by Kube32, which runs NonIndexed Jobs only.',
};
