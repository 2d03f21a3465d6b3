/**
 * The network layer's hands: iproute2 (`ip -j`), `nft -j`, `conntrack` and sysctl files, run
 * from Node in the process's own network namespace. Every failure names the command and keeps
 * its standard error.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NetworkError } from './errors.ts';

/** How long one command may take before it counts as failed, ms. */
export const COMMAND_TIMEOUT_MS = 20_000;

/** The result of a command that exited 0. */
export interface CommandResult {
  stdout: string;
  stderr: string;
}

/**
 * Runs a program without a shell.
 * @param input written to its standard input (nft's JSON batch)
 * @throws NetworkError INTERNAL "`ip link set ...` failed: <stderr>" when it cannot start or exits non-zero
 */
export function run(file: string, args: string[], input?: string): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    const child = execFile(file, args, { timeout: COMMAND_TIMEOUT_MS, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) {
        const why = (stderr || err.message).trim().split('\n').slice(0, 6).join('; ');
        reject(Object.assign(new NetworkError('INTERNAL', `\`${file} ${args.join(' ')}\` failed: ${why}`, { cause: err }), { stderr }));
        return;
      }
      resolve({ stdout, stderr });
    });
    if (input !== undefined) {
      child.stdin?.on('error', () => {});
      child.stdin?.end(input);
    }
  });
}

/** `ip ARGS`. @throws NetworkError as {@link run} */
export function ip(...args: string[]): Promise<CommandResult> {
  return run('ip', args);
}

/** `ip -j ARGS`, parsed. @throws NetworkError as {@link run} */
export async function ipJson<T = unknown>(...args: string[]): Promise<T> {
  const { stdout } = await run('ip', ['-j', ...args]);
  return (stdout.trim() === '' ? [] : JSON.parse(stdout)) as T;
}

/** Whether an error of {@link run} says the object is not there (so that an undo is done already). */
export function isMissing(err: unknown): boolean {
  const text = `${(err as { stderr?: string }).stderr ?? ''} ${(err as Error).message ?? ''}`;
  return /Cannot find device|No such file or directory|does not exist|No such device|No such process|Object not found|Cannot find/i.test(text);
}

/**
 * Writes a sysctl under /proc/sys ("net/ipv4/ip_forward").
 * @throws NetworkError INTERNAL naming the key and the value
 */
export async function setSysctl(key: string, value: string | number): Promise<void> {
  try {
    await writeFile(`/proc/sys/${key}`, String(value));
  } catch (err: unknown) {
    throw new NetworkError('INTERNAL', `sysctl ${key.replaceAll('/', '.')}=${value} failed: ${(err as Error).message}`, { cause: err });
  }
}

/** Reads a sysctl; undefined when it is not there. */
export async function getSysctl(key: string): Promise<string | undefined> {
  try {
    return (await readFile(`/proc/sys/${key}`, 'utf8')).trim();
  } catch {
    return undefined;
  }
}

/** One nftables JSON command ({ add: { table: ... } }, { flush: ... }, ...). */
export type NftCommand = Record<string, unknown>;

/**
 * Runs nftables JSON commands as one transaction (`nft -j -f FILE`): all of them or none.
 * @throws NetworkError INTERNAL with nft's error when the kernel refuses the batch
 */
export async function nft(commands: NftCommand[]): Promise<void> {
  // nft reads "-" by opening /dev/stdin, which fails on the socket Node gives a child as its
  // stdin: the batch goes through a file of its own.
  const dir = await mkdtemp(join(tmpdir(), 'feos-nft-'));
  try {
    const file = join(dir, 'batch.json');
    await writeFile(file, JSON.stringify({ nftables: commands }), { mode: 0o600 });
    await run('nft', ['-j', '-f', file]);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** `nft -j list ...`, parsed to the list of objects. @throws NetworkError as {@link run} */
export async function nftList(...what: string[]): Promise<Array<Record<string, unknown>>> {
  const { stdout } = await run('nft', ['-j', 'list', ...what]);
  return (JSON.parse(stdout) as { nftables: Array<Record<string, unknown>> }).nftables;
}
