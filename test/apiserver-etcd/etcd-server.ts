/**
 * A real etcd (Debian's `etcd-server`) for tests and benchmarks: loopback, free ports, a temp data
 * dir, killed and removed at cleanup. Ready when its `/health` answers `{"health":"true"}`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Where cleanups go: a test's context (`t.after`), or a benchmark's own list. */
export interface Cleanups {
  after(fn: () => unknown): void;
}

/** A running etcd. */
export interface TestEtcd {
  /** Client URL, e.g. `http://127.0.0.1:40123`. */
  url: string;
  dir: string;
  /** The current etcd process. */
  proc: ChildProcess;
  /** Kills etcd (SIGKILL) and starts it again on the same ports and data. */
  restart(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

async function kill(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGCONT');
  proc.kill('SIGKILL');
  await exited;
}

/**
 * Starts etcd and waits (at most 20 s) for it to be healthy.
 * @throws Error when it exits or is not healthy in time (with its last output)
 */
export async function startEtcd(t: Cleanups, extraArgs: string[] = [], attempt = 1): Promise<TestEtcd> {
  const dir = mkdtempSync(join(tmpdir(), 'kube32-etcd-'));
  const [client, peer] = [await freePort(), await freePort()];
  const url = `http://127.0.0.1:${client}`;
  const peerUrl = `http://127.0.0.1:${peer}`;
  const args = [
    '--name', 'test', '--data-dir', join(dir, 'data'),
    '--listen-client-urls', url, '--advertise-client-urls', url,
    '--listen-peer-urls', peerUrl, '--initial-advertise-peer-urls', peerUrl,
    '--initial-cluster', `test=${peerUrl}`, '--log-level', 'warn',
    ...extraArgs,
  ];
  let output = '';
  const launch = async (): Promise<ChildProcess> => {
    const proc = spawn('etcd', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    proc.stderr?.on('data', (b: Buffer) => {
      output = (output + b.toString()).slice(-4000);
    });
    const deadline = Date.now() + 20_000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`etcd exited (${proc.exitCode}): ${output}`);
      try {
        const r = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) });
        const body = (await r.json()) as { health?: string };
        if (body.health === 'true') return proc;
      } catch {
        // not up yet
      }
      if (Date.now() > deadline) throw new Error(`etcd not healthy within 20 s: ${output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  const etcd: TestEtcd = {
    url,
    dir,
    proc: undefined as unknown as ChildProcess,
    async restart() {
      await kill(etcd.proc);
      etcd.proc = await launch();
    },
  };
  try {
    etcd.proc = await launch();
  } catch (err: unknown) {
    rmSync(dir, { recursive: true, force: true });
    // The free ports were picked before etcd bound them: another test's process may have taken one
    // in between. Pick others (a bounded number of times) rather than fail on that race.
    if (attempt < 3 && /address already in use/.test(String(err))) return startEtcd(t, extraArgs, attempt + 1);
    throw err;
  }
  t.after(async () => {
    if (etcd.proc) await kill(etcd.proc);
    rmSync(dir, { recursive: true, force: true });
  });
  return etcd;
}
