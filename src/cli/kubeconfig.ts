/**
 * Which cluster a kube32-cli command talks to, decided exactly as kubectl decides it:
 *
 * 1. `--kubeconfig FILE`: that one file, which must exist;
 * 2. else `$KUBECONFIG`: a list of files (`:`-separated) merged in order, the first file to set a value
 *    winning (a cluster, user or context named in two files is taken from the first; `current-context`
 *    from the first file that sets one); files that do not exist are skipped;
 * 3. else `~/.kube/config`.
 *
 * Then `--context NAME` overrides `current-context`, and the namespace is `-n/--namespace`, else the
 * context's `namespace`, else `default`. Relative certificate and key paths are resolved against the
 * file that names them, as kubectl does.
 */
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { CliError } from './errors.ts';
import type { ClusterFlags } from './flags.ts';
import { defaultDataDir } from './paths.ts';

export { addClusterFlags, type ClusterFlags } from './flags.ts';

/** The cluster a command talks to. */
export interface ClusterTarget {
  /** Credentials and server of the chosen context (client-node's own type, ready for its APIs). */
  kubeConfig: KubeConfig;
  /** The namespace the command acts in. */
  namespace: string;
  /** The context used. */
  context: string;
  /** The files read, in order. */
  files: string[];
}

/** The kubeconfig files kubectl would read, in order (they need not all exist). */
export function kubeconfigFiles(flags: ClusterFlags, env: NodeJS.ProcessEnv = process.env): string[] {
  if (flags.kubeconfig) return [resolve(flags.kubeconfig)];
  const list = env.KUBECONFIG ?? '';
  if (list.length > 0) return list.split(delimiter).filter((f) => f.length > 0).map((f) => resolve(f));
  return [join(env.HOME || homedir(), '.kube', 'config')];
}

/**
 * Loads the kubeconfig as kubectl does (see the module's summary) and picks the context.
 * @throws CliError when `--kubeconfig` names a missing file, when no file exists, when the context is
 *   unknown or when it names a cluster or user that no file defines; the messages are kubectl's
 */
export function loadClusterTarget(flags: ClusterFlags, env: NodeJS.ProcessEnv = process.env): ClusterTarget {
  const files = kubeconfigFiles(flags, env);
  if (flags.kubeconfig && !existsSync(files[0]!)) {
    throw new CliError(`stat ${flags.kubeconfig}: no such file or directory`);
  }
  const merged = new KubeConfig();
  merged.clusters = [];
  merged.users = [];
  merged.contexts = [];
  merged.currentContext = '';
  const read: string[] = [];
  for (const file of files) {
    if (!existsSync(file)) continue;
    const one = new KubeConfig();
    try {
      one.loadFromFile(file); // resolves relative certificate paths against the file's directory
    } catch (err: unknown) {
      throw new CliError(`error loading config file "${file}": ${err instanceof Error ? err.message : String(err)}`, 1, {
        cause: err,
      });
    }
    read.push(file);
    // First file wins, as in kubectl's merge (k8s.io/client-go/tools/clientcmd: ClientConfigLoadingRules).
    for (const c of one.clusters ?? []) if (!merged.clusters.some((x) => x.name === c.name)) merged.clusters.push(c);
    for (const u of one.users ?? []) if (!merged.users.some((x) => x.name === u.name)) merged.users.push(u);
    for (const c of one.contexts ?? []) if (!merged.contexts.some((x) => x.name === c.name)) merged.contexts.push(c);
    if (!merged.currentContext && one.currentContext) merged.currentContext = one.currentContext;
  }
  if (read.length === 0) {
    // kubectl does not read `up`'s kubeconfig either; where one is, say how to use it.
    const local = join(defaultDataDir(env), 'kubeconfig');
    throw new CliError(
      existsSync(local)
        ? `no kubeconfig found (looked at ${files.join(', ')}); "kube32-cli up" wrote one for its local cluster: export KUBECONFIG=${local} (or pass --kubeconfig ${local})`
        : `no kubeconfig found (looked at ${files.join(', ')}): pass --kubeconfig, set KUBECONFIG, or start a local cluster with "kube32-cli up"`,
    );
  }
  const context = flags.context ?? merged.currentContext;
  if (!context) throw new CliError('current-context is not set in the kubeconfig; pass --context');
  const ctx = merged.getContextObject(context);
  if (!ctx) throw new CliError(`context was not found for specified context: ${context}`);
  if (!merged.getCluster(ctx.cluster)) throw new CliError(`cluster "${ctx.cluster}" of context "${context}" is not in the kubeconfig`);
  if (ctx.user && !merged.getUser(ctx.user)) throw new CliError(`user "${ctx.user}" of context "${context}" is not in the kubeconfig`);
  merged.setCurrentContext(context);
  const namespace = flags.namespace || ctx.namespace || 'default';
  return { kubeConfig: merged, namespace, context, files: read };
}
