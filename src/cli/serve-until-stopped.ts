/**
 * The end of a long-running server command (`apiserver`, `control-plane`): announce where it listens,
 * then serve until SIGINT or SIGTERM (or, started by `up`, until `up` is gone) and shut down.
 */
import { watchParent, writeFileAtomic } from '../lib/index.ts';

/** What the announcement names. */
export interface ServerAddress {
  url: string;
  port: number;
  kubeconfigPath?: string;
  /** The port of this process alone (`--peer-advertise-port`); printed as `peerPort` when set. */
  peerPort?: number;
  /** The port for FeOS nodes (`control-plane --feos-listen`), host:port; printed as `feos` when set. */
  feosAddress?: string;
}

/**
 * Prints one JSON line `{"url","port","kubeconfig"}` (and `peerPort`, `feos` when set) on standard output (and writes it whole to
 * `listenFile` when given), then waits for SIGINT or SIGTERM and runs `shutdown` once.
 * @param shutdown stops what the command started; errors are the caller's to handle
 */
export async function serveUntilStopped(server: ServerAddress, listenFile: string | undefined, shutdown: () => Promise<void>): Promise<void> {
  const line = `${JSON.stringify({ url: server.url, port: server.port, kubeconfig: server.kubeconfigPath ?? null, ...(server.peerPort !== undefined ? { peerPort: server.peerPort } : {}), ...(server.feosAddress ? { feos: server.feosAddress } : {}) })}\n`;
  if (listenFile) await writeFileAtomic(listenFile, line);
  process.stdout.write(line);
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      void shutdown().then(resolve);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
    // Started by `kube32-cli up`: a SIGKILLed up must not leave this server running (lib/parent-watch.ts).
    watchParent();
  });
}
