/**
 * `kube32-cli kubeconfig user`'s work (see ../commands/kubeconfig.ts).
 */
import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { userKubeconfig } from '../../apiserver/index.ts';
import { writeFileAtomicSync } from '../../lib/index.ts';
import { CliError } from '../errors.ts';
import type { KubeconfigUserFlags } from '../commands/kubeconfig.ts';

/**
 * Writes user `name`'s kubeconfig to `flags.out` (0600) or standard output.
 * @throws CliError for a bad name or group, a data dir without a cluster CA, or an `--out` whose directory is missing or cannot be written
 */
export async function kubeconfigUser(name: string, flags: KubeconfigUserFlags & { dataDir: string }): Promise<void> {
  if (!name.trim() || /[\n\r]/.test(name)) throw new CliError(`the user name must be a non-empty line of text: current value is ${JSON.stringify(name)}`);
  for (const g of flags.group) if (!g.trim() || /[\n\r]/.test(g)) throw new CliError(`--group must be a non-empty line of text: current value is ${JSON.stringify(g)}`);
  if (name.startsWith('system:') || flags.group.includes('system:masters')) {
    if (flags.group.includes('system:masters')) process.stderr.write('kube32-cli: warning: the group system:masters bypasses RBAC: the kubeconfig may do anything\n');
    if (name.startsWith('system:')) {
      // Names under system: are the components' (the default policy binds some of them, the Node authorizer reads
      // system:node:<name> with the group system:nodes); the certificate gets whatever rights those give the name.
      process.stderr.write(`kube32-cli: warning: "${name}": names starting with system: are reserved for the cluster's components; the kubeconfig gets whatever rights the cluster gives that name (kubectl auth can-i --list --as ${JSON.stringify(name)} shows them)\n`);
    }
  }
  if (!existsSync(join(flags.dataDir, 'pki', 'ca.key'))) {
    throw new CliError(`${join(flags.dataDir, 'pki', 'ca.key')}: no cluster CA there: give the data dir of a cluster that has started (--data-dir, or $KUBE32_DATA_DIR)`);
  }
  let text: string;
  try {
    text = await userKubeconfig(flags.dataDir, { name, groups: flags.group, namespace: flags.namespace });
  } catch (err: unknown) {
    throw new CliError(err instanceof Error ? err.message : String(err));
  }
  if (flags.out) writeOut(flags.out, text);
  else process.stdout.write(text);
}

/**
 * Writes the kubeconfig whole (0600) to `out`, saying what to fix when it cannot: the temp file beside it
 * is this command's business, not the user's (its ENOENT named `.x.<pid>.<rand>.tmp`).
 * @throws CliError when `out`'s directory is missing or not a directory, or the write fails
 */
function writeOut(out: string, text: string): void {
  const dir = dirname(out);
  const st = statSync(dir, { throwIfNoEntry: false });
  if (!st) throw new CliError(`--out ${out}: the directory ${dir} does not exist: create it first, or pass another --out`);
  if (!st.isDirectory()) throw new CliError(`--out ${out}: ${dir} is not a directory: pass another --out`);
  if (statSync(out, { throwIfNoEntry: false })?.isDirectory()) throw new CliError(`--out ${out}: it is a directory: name a file in it, as ${join(out, 'kubeconfig')}`);
  try {
    writeFileAtomicSync(out, text, 0o600);
  } catch (err: unknown) {
    const code = (err as { code?: string } | null)?.code;
    throw new CliError(`--out ${out}: cannot write it${code ? ` (${code})` : ''}: ${code === 'EACCES' || code === 'EPERM' ? `no permission to write in ${dir}` : err instanceof Error ? err.message : String(err)}`, 1, { cause: err });
  }
}
