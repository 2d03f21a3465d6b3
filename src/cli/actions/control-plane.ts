/**
 * `kube32-cli control-plane`: the API server and every controller in ONE process. Loaded only when the
 * command runs (its flags and help are in ../commands/control-plane.ts), so that `--help` and the other
 * commands load neither the API server, nor the controllers, nor the Kubernetes client.
 */
import { KubeConfig } from '@kubernetes/client-node';
import { createApiServer } from '../../apiserver/index.ts';
import { type ControllerTimings, startControllers } from '../../controllers/index.ts';
import { parseBytes, parseDuration } from '../../lib/index.ts';
import { type ApiServerClusterFlags, parseApiServerClusterFlags } from '../apiserver-flags.ts';
import { CliError } from '../errors.ts';
import { serveUntilStopped } from '../serve-until-stopped.ts';

/** `control-plane`'s flags as commander parses them (strings as typed). */
export interface ControlPlaneFlags extends ApiServerClusterFlags {
  dataDir?: string;
  storage: string;
  etcdEndpoints?: string;
  port: string;
  bind: string;
  checkpointDataBytes: string;
  nodeMonitorGracePeriod: string;
  podEvictionTimeout: string;
  moveTimeout: string;
  checkpointRetention: string;
  listenFile?: string;
  certSan: string[];
  leaderElect?: boolean;
  leaderElectIdentity?: string;
}

/** A positive duration flag in milliseconds, or a CliError naming the flag. */
function duration(flag: string, text: string): number {
  try {
    const ms = parseDuration(text);
    if (ms <= 0) throw new RangeError('must be positive');
    return ms;
  } catch (err: unknown) {
    throw new CliError(`--${flag}: ${err instanceof Error ? err.message : String(err)}`);
  }
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
  const port = Number(flags.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new CliError(`--port must be a TCP port (0-65535): current value is ${flags.port}`);
  let dataBytes: number;
  try {
    dataBytes = parseBytes(flags.checkpointDataBytes);
  } catch (err: unknown) {
    throw new CliError(`--checkpoint-data-bytes: ${err instanceof Error ? err.message : String(err)}`);
  }
  const timings: Partial<ControllerTimings> = {
    nodeMonitorGracePeriodMs: duration('node-monitor-grace-period', flags.nodeMonitorGracePeriod),
    podEvictionTimeoutMs: duration('pod-eviction-timeout', flags.podEvictionTimeout),
    moveTimeoutMs: duration('move-timeout', flags.moveTimeout),
    checkpointRetentionMs: duration('checkpoint-retention', flags.checkpointRetention),
  };
  const cluster = parseApiServerClusterFlags(flags);
  let server: Awaited<ReturnType<typeof createApiServer>>;
  try {
    server = await createApiServer({
      ...cluster,
      dataDir: flags.dataDir,
      storage: flags.storage as 'sqlite' | 'etcd',
      etcdEndpoints: flags.etcdEndpoints?.split(',').filter(Boolean),
      port,
      bindAddress: flags.bind,
      checkpointDataBytes: dataBytes,
      certificateSans: flags.certSan,
    });
  } catch (err: unknown) {
    throw new CliError(err instanceof Error ? err.message : String(err), 1, { cause: err });
  }
  let controllers: Awaited<ReturnType<typeof startControllers>>;
  try {
    if (!server.kubeconfigPath) throw new Error('the API server wrote no admin kubeconfig');
    const kc = new KubeConfig();
    kc.loadFromFile(server.kubeconfigPath);
    controllers = await startControllers({
      kubeConfig: kc,
      timings,
      leaderElection: flags.leaderElect ? { ...(flags.leaderElectIdentity ? { identity: flags.leaderElectIdentity } : {}) } : false,
      onLostLeadership: () => {
        // As kube-controller-manager does: a control plane that lost the Lease exits; its supervisor restarts it.
        process.stderr.write('error: lost the controllers\' Lease; exiting\n');
        process.exit(1);
      },
    });
  } catch (err: unknown) {
    await server.close();
    throw new CliError(`starting the controllers: ${err instanceof Error ? err.message : String(err)}`, 1, { cause: err });
  }
  await serveUntilStopped(server, flags.listenFile, () =>
    controllers
      .stop()
      .catch(() => {})
      .then(() => server.close()),
  );
}
