/**
 * Credentials for a worker of a local cluster: a node kubeconfig (user `system:node:<name>`, group
 * `system:nodes`) minted by the API server's own helper from the control plane's data dir (its CA and
 * token key), written where the worker reads it. The API server's module is loaded on the first call
 * only: `up` starts the control plane before it needs it.
 */
import { CliError } from './errors.ts';

/**
 * Writes a node kubeconfig for `nodeName` to `path` (mode 0600).
 * @param dataDir the control plane's data dir; its admin kubeconfig must exist (the control plane has started)
 * @returns `path`
 * @throws CliError naming the node when minting fails (no admin kubeconfig yet, a bad node name)
 */
export async function issueWorkerKubeconfig(dataDir: string, nodeName: string, path: string): Promise<string> {
  const { issueNodeKubeconfig } = await import('../apiserver/index.ts');
  try {
    return issueNodeKubeconfig(dataDir, nodeName, { path });
  } catch (err: unknown) {
    throw new CliError(`minting the kubeconfig of node ${nodeName}: ${err instanceof Error ? err.message : String(err)}`, 1, { cause: err });
  }
}
