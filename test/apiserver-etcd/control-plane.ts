/**
 * Helpers of test/apiserver-etcd/: a `kube32-cli control-plane --storage etcd --leader-elect`
 * process (stopped and removed in `t.after`), kubectl against a kubeconfig, and a bounded poll.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { TestContext } from 'node:test';
import { waitFor } from '../helpers/wait.ts';

export const ROOT = new URL('../../', import.meta.url).pathname;
export const CLI = join(ROOT, 'bin/kube32-cli.js');

/** A running control plane process. */
export interface ControlPlaneProcess {
  proc: ChildProcess;
  /** Its data dir (PKI, tokens, admin kubeconfig). */
  dataDir: string;
  /** The admin kubeconfig it printed. */
  kubeconfig: string;
  /** Its port for FeOS nodes, host:port, with `--feos-listen`. */
  feos?: string;
  exited: Promise<unknown>;
  /** The last 8 000 characters of its stderr. */
  logs(): string;
}

/** The real kubectl, bounded to 30 s; never throws. */
export function kubectl(kubeconfig: string, args: string[], input?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile('kubectl', ['--kubeconfig', kubeconfig, ...args], { timeout: 30_000, maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout: String(stdout), stderr: String(stderr) });
    });
    child.stdin?.end(input ?? '');
  });
}

/**
 * Starts `kube32-cli control-plane --storage etcd --etcd-endpoints <etcdUrl> --leader-elect` with
 * `identity`, and waits for the JSON line it prints when ready. Control planes on one etcd share the
 * cluster identity kept there (CA and token key: docs/etcd.md), so nothing is copied between data dirs.
 * @throws Error with its stderr when it exits first
 */
export async function startControlPlane(t: TestContext, etcdUrl: string, identity: string, opts: { extraArgs?: string[] } = {}): Promise<ControlPlaneProcess> {
  const dataDir = mkdtempSync(join(tmpdir(), `k32-cp-${identity}-`));
  const proc = spawn(
    process.execPath,
    [CLI, 'control-plane', '--storage', 'etcd', '--etcd-endpoints', etcdUrl, '--data-dir', dataDir, '--port', '0', '--leader-elect', '--leader-elect-identity', identity, ...(opts.extraArgs ?? [])],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn' } },
  );
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-8000);
  });
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    await exited;
    rmSync(dataDir, { recursive: true, force: true });
  });
  const line = await Promise.race([
    new Promise<string>((resolve) => createInterface(proc.stdout!).once('line', resolve)),
    exited.then((code) => {
      throw new Error(`control-plane ${identity} exited ${String(code)}: ${stderr}`);
    }),
  ]);
  const info = JSON.parse(line) as { kubeconfig: string; feos?: string };
  return { proc, dataDir, kubeconfig: info.kubeconfig, ...(info.feos ? { feos: info.feos } : {}), exited, logs: () => stderr };
}

/** Polls `read` until `ok` accepts its answer; a failed read counts as not yet. @throws Error after `ms` */
export async function eventually<T>(what: string, ms: number, read: () => Promise<T>, ok: (v: T) => boolean): Promise<T> {
  let last: T | undefined;
  const seen = await waitFor(
    what,
    ms,
    async () => {
      last = await read();
      return ok(last) ? { v: last } : undefined;
    },
    { intervalMs: 100, describe: () => `last read: ${JSON.stringify(last)}` },
  );
  return seen.v;
}
