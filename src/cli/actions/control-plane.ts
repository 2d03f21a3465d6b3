/**
 * `kube32-cli control-plane`: the API server and every controller in ONE process. Loaded only when the
 * command runs (its flags and help are in ../commands/control-plane.ts), so that `--help` and the other
 * commands load neither the API server, nor the controllers, nor the Kubernetes client.
 */
import { KubeConfig } from '@kubernetes/client-node';
import { createApiServer } from '../../apiserver/index.ts';
import { type ControllerTimings, startControllers } from '../../controllers/index.ts';
import { parseBytes } from '../../lib/index.ts';
import { type ApiServerClusterFlags, parseApiServerClusterFlags } from '../apiserver-flags.ts';
import { listenKeepingPort } from '../apiserver-port.ts';
import { claimServerDataDir } from '../data-dir-lock.ts';
import { durationFlagMs } from '../duration-flag.ts';
import { CliError } from '../errors.ts';
import { nodeMonitorGracePeriodMs } from '../node-monitor.ts';
import { serveUntilStopped } from '../serve-until-stopped.ts';
import { checkFeosPortFlags, type FeosPort, type FeosPortFlags, startFeosPort } from '../feos-flags.ts';

/** `control-plane`'s flags as commander parses them (strings as typed). */
export interface ControlPlaneFlags extends ApiServerClusterFlags, FeosPortFlags {
  dataDir?: string;
  storage: string;
  etcdEndpoints?: string;
  port: string;
  bind: string;
  checkpointDataBytes: string;
  nodeMonitorGracePeriod: string;
  podEvictionTimeout: string;
  nodeLossRestoreDelay: string;
  moveTimeout: string;
  /** `--push-snapshots-to-target[=false]`: the controllers' `pushSnapshotsToTarget` (on unless false). */
  pushSnapshotsToTarget?: boolean;
  checkpointRetention: string;
  horizontalPodAutoscalerSyncPeriod: string;
  horizontalPodAutoscalerDownscaleStabilization: string;
  horizontalPodAutoscalerTolerance: string;
  horizontalPodAutoscalerCpuInitializationPeriod: string;
  horizontalPodAutoscalerInitialReadinessDelay: string;
  listenFile?: string;
  certSan: string[];
  /** `--leader-elect[=true|false]`; unset: true with `--storage etcd`, false with sqlite. */
  leaderElect?: boolean;
  leaderElectIdentity?: string;
}

/** `--horizontal-pod-autoscaler-tolerance`: a fraction above 0 and below 1 (0.1 is 10 %). */
function tolerance(text: string): number {
  const v = Number(text);
  if (!/^\d*\.?\d+$/.test(text.trim()) || !(v > 0 && v < 1)) {
    throw new CliError(`--horizontal-pod-autoscaler-tolerance must be a fraction between 0 and 1, such as 0.1 (10 %): current value is ${JSON.stringify(text)}`);
  }
  return v;
}

/**
 * Starts the API server, then the controllers as its REST clients (admin kubeconfig it wrote), prints
 * `{"url":...,"port":...,"kubeconfig":...}` on standard output (and in `--listen-file`) once both are
 * ready, and returns once SIGINT or SIGTERM has stopped the controllers, then the API server.
 * @throws CliError for a bad flag, an API server that cannot start (its message), or controllers that
 *   cannot start (the API server is closed first); with `--leader-elect`, losing the Lease exits the
 *   process with code 1
 */
export async function controlPlane(flags: ControlPlaneFlags): Promise<void> {
  // Digits only: Number('') and Number(' ') are 0, which would listen on a port picked at random.
  const port = /^\d+$/.test(String(flags.port)) ? Number(flags.port) : Number.NaN;
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new CliError(`--port must be a TCP port (0-65535): current value is ${JSON.stringify(flags.port)}`);
  let dataBytes: number;
  try {
    dataBytes = parseBytes(flags.checkpointDataBytes);
  } catch (err: unknown) {
    throw new CliError(`--checkpoint-data-bytes: ${err instanceof Error ? err.message : String(err)}`);
  }
  const timings: Partial<ControllerTimings> = {
    nodeMonitorGracePeriodMs: nodeMonitorGracePeriodMs(flags.nodeMonitorGracePeriod),
    podEvictionTimeoutMs: durationFlagMs('pod-eviction-timeout', flags.podEvictionTimeout),
    nodeLossRestoreDelayMs: durationFlagMs('node-loss-restore-delay', flags.nodeLossRestoreDelay),
    moveTimeoutMs: durationFlagMs('move-timeout', flags.moveTimeout),
    checkpointRetentionMs: durationFlagMs('checkpoint-retention', flags.checkpointRetention),
    horizontalPodAutoscalerSyncPeriodMs: durationFlagMs('horizontal-pod-autoscaler-sync-period', flags.horizontalPodAutoscalerSyncPeriod),
    horizontalPodAutoscalerDownscaleStabilizationMs: durationFlagMs('horizontal-pod-autoscaler-downscale-stabilization', flags.horizontalPodAutoscalerDownscaleStabilization),
    horizontalPodAutoscalerCpuInitializationPeriodMs: durationFlagMs('horizontal-pod-autoscaler-cpu-initialization-period', flags.horizontalPodAutoscalerCpuInitializationPeriod),
    horizontalPodAutoscalerInitialReadinessDelayMs: durationFlagMs('horizontal-pod-autoscaler-initial-readiness-delay', flags.horizontalPodAutoscalerInitialReadinessDelay),
    horizontalPodAutoscalerTolerance: tolerance(flags.horizontalPodAutoscalerTolerance),
  };
  checkFeosPortFlags(flags);
  const cluster = parseApiServerClusterFlags(flags);
  const storage = flags.storage as 'sqlite' | 'etcd';
  // Controllers of two control planes on one etcd must not both run: leader election unless opted out.
  const leaderElect = flags.leaderElect ?? storage === 'etcd';
  // Nothing in the data dir is touched before it is ours; a dir this run created goes if it is refused.
  const dataDir = flags.dataDir;
  const claim = dataDir ? claimServerDataDir(dataDir, 'kube32-cli control-plane') : undefined;
  const release = (): void => claim?.release();
  let server: Awaited<ReturnType<typeof createApiServer>>;
  try {
    // --port 0 keeps the port of this data dir's last run when it is free (apiserver-port.ts): node kubeconfigs name it.
    server = await listenKeepingPort(
      dataDir,
      port,
      (p) =>
        createApiServer({
          ...cluster,
          dataDir,
          storage,
          etcdEndpoints: flags.etcdEndpoints?.split(',').filter(Boolean),
          port: p,
          bindAddress: flags.bind,
          checkpointDataBytes: dataBytes,
          certificateSans: flags.certSan,
        }),
      (line) => process.stderr.write(`${line}\n`),
    );
  } catch (err: unknown) {
    claim?.abandon();
    throw new CliError(stripResolutionNote(err instanceof Error ? err.message : String(err)), 1, { cause: err });
  }
  let controllers: Awaited<ReturnType<typeof startControllers>>;
  const kc = new KubeConfig();
  try {
    if (!server.kubeconfigPath) throw new Error('the API server wrote no admin kubeconfig');
    kc.loadFromFile(server.kubeconfigPath);
    controllers = await startControllers({
      kubeConfig: kc,
      timings,
      pushSnapshotsToTarget: flags.pushSnapshotsToTarget !== false,
      leaderElection: leaderElect ? { ...(flags.leaderElectIdentity ? { identity: flags.leaderElectIdentity } : {}) } : false,
      onLostLeadership: () => {
        // As kube-controller-manager does: a control plane that lost the Lease exits; its supervisor restarts it.
        process.stderr.write('error: lost the controllers\' Lease; exiting\n');
        process.exit(1);
      },
    });
  } catch (err: unknown) {
    await server.close();
    release();
    throw new CliError(`starting the controllers: ${err instanceof Error ? err.message : String(err)}`, 1, { cause: err });
  }
  let feos: FeosPort | undefined;
  try {
    feos = dataDir ? await startFeosPort(flags, kc, dataDir) : undefined;
    if (feos) {
      server.setNodeTunnel(feos.tunnel);
      server.setFeosPodStreams(feos.podStreams);
    }
  } catch (err: unknown) {
    await controllers.stop().catch(() => {});
    await server.close();
    release();
    throw new CliError(`--feos-listen: ${err instanceof Error ? err.message : String(err)}`, 1, { cause: err });
  }
  await serveUntilStopped({ url: server.url, port: server.port, kubeconfigPath: server.kubeconfigPath, peerPort: server.peerPort, feosAddress: feos?.address }, flags.listenFile, () =>
    (feos?.close() ?? Promise.resolve())
      .catch(() => {})
      .then(() => controllers.stop())
      .catch(() => {})
      .then(() => server.close())
      .finally(release),
  );
}

/** etcd3's "Resolution note: ..." appended to its errors says only what the message said already. */
function stripResolutionNote(message: string): string {
  return message.replace(/\s*Resolution note:[\s\S]*$/, '');
}
