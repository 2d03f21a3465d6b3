/**
 * Credentials for a worker of a local cluster: a node kubeconfig (user `system:node:<name>`) minted by
 * the API server's own helper from the control plane's data dir, written where the worker reads it.
 */
import { writeFileAtomic } from '../lib/index.ts';
import { CliError } from './errors.ts';

type Issuer = (dataDir: string, nodeName: string) => unknown;

/**
 * Writes a node kubeconfig for `nodeName` to `path`.
 * @param dataDir the control plane's data dir (its CA and token store)
 * @returns `path`
 * @throws CliError when the API server offers no way to mint node credentials, or minting fails
 */
export async function issueWorkerKubeconfig(dataDir: string, nodeName: string, path: string): Promise<string> {
  // Loaded when a cluster starts, not when the CLI starts: `kube32-cli move` has no use for the server.
  const specifier = '../apiserver/index.ts';
  let issue: Issuer | undefined;
  try {
    const mod = (await import(import.meta.url.endsWith('.ts') ? specifier : specifier.replace(/\.ts$/, '.js'))) as {
      issueNodeKubeconfig?: Issuer;
    };
    issue = mod.issueNodeKubeconfig;
  } catch (err: unknown) {
    throw new CliError(`cannot load the API server to mint node credentials: ${(err as Error).message}`, 1, { cause: err });
  }
  if (typeof issue !== 'function') throw new CliError('the API server does not export issueNodeKubeconfig(dataDir, nodeName)');
  let minted: unknown;
  try {
    minted = await issue(dataDir, nodeName);
  } catch (err: unknown) {
    throw new CliError(`minting the kubeconfig of node ${nodeName}: ${(err as Error).message}`, 1, { cause: err });
  }
  if (typeof minted !== 'string') throw new CliError(`issueNodeKubeconfig answered ${typeof minted}, not a kubeconfig`);
  await writeFileAtomic(path, minted, 0o600);
  return path;
}
