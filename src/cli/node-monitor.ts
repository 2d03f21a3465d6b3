/**
 * The check of `--node-monitor-grace-period` (control-plane, up): it must be longer than the interval at
 * which nodes renew their Lease and post their status (10 s, kube32-sim's and the kubelet's
 * `nodeStatusUpdateFrequency`, `src/kubelet` HEARTBEAT_MS), or a node that is on time turns NotReady
 * between two renewals and back (nodes flapped with 10 s). Kubernetes asks for several intervals (40 s).
 */
import { parseDuration } from '../lib/index.ts';
import { CliError } from './errors.ts';

/** The nodes' status interval, ms (the kubelet's HEARTBEAT_MS). */
export const NODE_STATUS_INTERVAL_MS = 10_000;

/**
 * Parses `--node-monitor-grace-period`.
 * @returns the grace period in ms
 * @throws CliError for a value that does not parse, or one not longer than the status interval
 */
export function nodeMonitorGracePeriodMs(text: string): number {
  let ms: number;
  try {
    ms = parseDuration(text);
  } catch (err: unknown) {
    throw new CliError(`--node-monitor-grace-period: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (ms <= NODE_STATUS_INTERVAL_MS) {
    throw new CliError(
      `--node-monitor-grace-period must be longer than the nodes' status interval (${NODE_STATUS_INTERVAL_MS / 1000}s), or nodes on time turn NotReady between two renewals: current value is ${text}; use at least 20s (Kubernetes' default is 40s)`,
    );
  }
  return ms;
}
