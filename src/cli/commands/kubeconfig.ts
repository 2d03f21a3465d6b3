/**
 * kube32-cli `kubeconfig user NAME [--group G]...`: a kubeconfig for a user of the cluster, with a client
 * certificate the cluster's CA (in the data dir) signs: CN NAME, O each group, as Kubernetes reads them.
 * The user can do nothing until RBAC grants it (`kubectl create rolebinding NAME-edit --clusterrole edit
 * --user NAME -n NS`); docs/apiserver.md "Authorization". The code is loaded only when the command runs.
 */
import { resolve } from 'node:path';
import type { Command } from 'commander';
import { defaultDataDir } from '../paths.ts';
import { dataDirFlag } from '../flags.ts';

/** `kubeconfig user`'s options. */
export interface KubeconfigUserFlags {
  group: string[];
  dataDir?: string;
  namespace?: string;
  out?: string;
}

/** Adds `kubeconfig user` to `program`. */
export function register(program: Command): void {
  const kc = program.command('kubeconfig').summary("Kubeconfigs for the cluster's users").description("Write kubeconfigs for the cluster's users, signed by its CA.");
  kc.command('user')
    .summary("Write a user's kubeconfig (a client certificate from the cluster CA)")
    .description(
      [
        "Write a kubeconfig for user NAME with a client certificate the cluster's CA signs (CN NAME, O each --group; valid 1 year), for the server of DATA_DIR/kubeconfig. It goes to standard output, or to --out (mode 0600: it holds the private key).",
        'The user has no rights until RBAC grants them, e.g.\n  kubectl create rolebinding alice-edit --clusterrole edit --user alice -n team\n  kubectl create clusterrolebinding bob-view --clusterrole view --user bob',
      ].join('\n\n'),
    )
    .argument('<name>', 'the user name (the certificate CN)')
    .option('--group <group>', 'a group of the user (the certificate O); repeat for more', (v: string, prev: string[]) => [...prev, v], [] as string[])
    .option('--data-dir <dir>', 'the data dir of the cluster (its pki/ca.key and kubeconfig; default: $KUBE32_DATA_DIR or ~/.kube32)', dataDirFlag)
    .option('-n, --namespace <ns>', "the context's namespace", 'default')
    .option('--out <file>', 'write the kubeconfig there (0600) instead of standard output')
    .action(async (name: string, flags: KubeconfigUserFlags) => {
      const { kubeconfigUser } = await import('../actions/kubeconfig.ts');
      await kubeconfigUser(name, { ...flags, dataDir: resolve(flags.dataDir ?? defaultDataDir()) });
    });
}
