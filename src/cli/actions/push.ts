/**
 * `kube32-cli push FILE.wasm [--name NAME]`: stores a module in the cluster's module store
 * (`PUT /apis/kube32.io/v1/modules/<name>/data`), so that pods can name it `wasm://NAME`, and prints its
 * digest. Loaded only when `push` runs (see ../commands/workloads.ts for its flags).
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { kubectlAction } from '../action.ts';
import { apiJson } from '../api-client.ts';
import { CliError } from '../errors.ts';
import type { ClusterFlags } from '../flags.ts';
import { loadClusterTarget } from '../kubeconfig.ts';
import { dnsSubdomainProblem } from '../names.ts';
import { formatObject, formatSize, parseOutputFormat } from '../output.ts';

/** `push`'s flags as commander parses them. */
export interface PushFlags extends ClusterFlags {
  name?: string;
  output?: string;
}

/** A kube32.io/v1 Module as the module store answers it. */
interface Module {
  apiVersion: string;
  kind: 'Module';
  metadata: { name: string };
  spec?: { sha256?: string; sizeBytes?: number };
}

/** The first bytes of every WebAssembly binary module: `\0asm`, version 1. */
const WASM_MAGIC = Buffer.from([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]);

/**
 * Runs `push`.
 * @throws CliError for a bad module name, an unreadable file or one that is not a WebAssembly binary
 *   (nothing is sent), or a digest the cluster stored differently; API refusals print as kubectl's
 */
export const push = kubectlAction(async function push(file: string, flags: PushFlags): Promise<void> {
  const format = parseOutputFormat(flags.output);
  const name = flags.name ?? basename(file).replace(/\.wasm$/, '');
  const problem = dnsSubdomainProblem(name);
  if (problem) throw new CliError(`invalid module name "${name}": ${problem}${flags.name !== undefined ? '' : ' (pass --name)'}`);
  let bytes: Buffer;
  try {
    bytes = await readFile(file);
  } catch (err: unknown) {
    const code = (err as { code?: string }).code;
    const why =
      code === 'ENOENT' ? `the path "${file}" does not exist`
      : code === 'EISDIR' ? `${file} is a directory: pass the module's .wasm file`
      : `${file}: ${(err as Error).message}`;
    throw new CliError(why, 1, {
      cause: err,
    });
  }
  if (bytes.length < 8 || !bytes.subarray(0, 8).equals(WASM_MAGIC)) {
    throw new CliError(`${file} is not a WebAssembly binary module (it does not start with \\0asm, version 1)`);
  }
  const digest = createHash('sha256').update(bytes).digest('hex');
  const { kubeConfig } = loadClusterTarget(flags);
  const module = await apiJson<Module>(kubeConfig, {
    method: 'PUT',
    path: `/apis/kube32.io/v1/modules/${encodeURIComponent(name)}/data`,
    body: bytes,
    contentType: 'application/octet-stream',
  });
  const stored = module.spec?.sha256;
  if (stored && stored !== digest) {
    throw new CliError(`the cluster stored module ${name} with digest sha256:${stored}, but ${file} has sha256:${digest}`);
  }
  if (format) {
    process.stdout.write(formatObject(module, format, 'module.kube32.io'));
    return;
  }
  process.stdout.write(`module.kube32.io/${name} pushed: sha256:${digest} (${formatSize(bytes.length)}); image: wasm://${name}\n`);
});
