/**
 * The `kube32-cli apiserver` command's work, loaded only when it runs (the API server and its
 * dependencies are large; `--help` must not load them). See ../commands/apiserver.ts for the flags.
 */
import { parseBytes, parseDuration } from '../../lib/index.ts';
import { createApiServer, issueNodeKubeconfig } from '../../apiserver/index.ts';
import { type ApiServerClusterFlags, parseApiServerClusterFlags } from '../apiserver-flags.ts';
import { listenKeepingPort } from '../apiserver-port.ts';
import { claimServerDataDir } from '../data-dir-lock.ts';
import { CliError } from '../errors.ts';
import { serveUntilStopped } from '../serve-until-stopped.ts';

/** The flags of `kube32-cli apiserver`, as commander parses them. */
export interface ApiServerFlags extends ApiServerClusterFlags {
  dataDir?: string;
  port: string;
  bind: string;
  storage: string;
  etcdEndpoints?: string;
  insecureHttp?: boolean;
  checkpointDataBytes: string;
  maxBodyBytes: string;
  maxModuleBytes: string;
  listenFile?: string;
  certSan: string[];
  watchWindow: string;
  watchBufferBytes: string;
  eventTtl: string;
  headersTimeout: string;
  issueNodeKubeconfig?: string;
  out?: string;
}

/**
 * Runs the API server until SIGINT or SIGTERM, or with `--issue-node-kubeconfig` writes a kubelet's
 * kubeconfig and returns.
 * @throws CliError for a bad flag value or a server that cannot start (exit 1)
 */
export async function apiserver(flags: ApiServerFlags): Promise<void> {
  if (flags.issueNodeKubeconfig !== undefined) {
    if (!flags.dataDir) throw new CliError('--issue-node-kubeconfig needs --data-dir');
    process.stdout.write(`${issueNodeKubeconfig(flags.dataDir, flags.issueNodeKubeconfig, { path: flags.out })}\n`);
    return;
  }
  // Digits only: Number('') and Number(' ') are 0, which would listen on a port picked at random.
  const port = /^\d+$/.test(String(flags.port)) ? Number(flags.port) : Number.NaN;
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new CliError(`--port must be a TCP port (0-65535): current value is ${JSON.stringify(flags.port)}`);
  const watchWindow = Number(flags.watchWindow);
  if (!Number.isInteger(watchWindow) || watchWindow < 1) throw new CliError(`--watch-window must be a positive number of events: current value is ${flags.watchWindow}`);
  let eventTtlMs: number;
  try {
    eventTtlMs = parseDuration(flags.eventTtl);
  } catch (err: unknown) {
    throw new CliError(`--event-ttl: ${err instanceof Error ? err.message : String(err)}`);
  }
  let headersTimeoutMs: number;
  try {
    headersTimeoutMs = parseDuration(flags.headersTimeout);
  } catch (err: unknown) {
    throw new CliError(`--headers-timeout: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (headersTimeoutMs < 100) throw new CliError(`--headers-timeout must be at least 100ms: current value is ${flags.headersTimeout}`);
  let sizes: number[];
  try {
    sizes = [parseBytes(flags.checkpointDataBytes), parseBytes(flags.maxBodyBytes), parseBytes(flags.maxModuleBytes), parseBytes(flags.watchBufferBytes)];
  } catch (err: unknown) {
    throw new CliError(err instanceof Error ? err.message : String(err));
  }
  const cluster = parseApiServerClusterFlags(flags);
  // Nothing in the data dir is touched before it is ours; a dir this run created goes if it is refused.
  const claim = flags.dataDir ? claimServerDataDir(flags.dataDir, 'kube32-cli apiserver') : undefined;
  let server: Awaited<ReturnType<typeof createApiServer>>;
  try {
    // --port 0 keeps the port of this data dir's last run when it is free (apiserver-port.ts): node kubeconfigs name it.
    server = await listenKeepingPort(
      flags.dataDir,
      port,
      (p) =>
        createApiServer({
          ...cluster,
          dataDir: flags.dataDir,
          port: p,
          bindAddress: flags.bind,
          storage: flags.storage as 'sqlite' | 'memory' | 'etcd',
          etcdEndpoints: flags.etcdEndpoints?.split(',').filter(Boolean),
          insecureHttp: flags.insecureHttp === true,
          checkpointDataBytes: sizes[0],
          maxBodyBytes: sizes[1],
          maxModuleBytes: sizes[2],
          certificateSans: flags.certSan,
          watchWindow,
          watchBufferBytes: sizes[3],
          headersTimeoutMs,
          eventTtlMs,
        }),
      (line) => process.stderr.write(`${line}\n`),
    );
  } catch (err: unknown) {
    claim?.abandon();
    throw new CliError(err instanceof Error ? err.message : String(err), 1, { cause: err });
  }
  await serveUntilStopped(server, flags.listenFile, () => server.close().finally(() => claim?.release()));
}
