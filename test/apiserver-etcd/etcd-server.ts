/**
 * A real etcd (Debian's `etcd-server`) for tests and benchmarks: loopback, free ports, a temp data
 * dir, killed and removed at cleanup. Ready when its `/health` answers `{"health":"true"}`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
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

/**
 * A TCP port on 127.0.0.1 that is free now, picked at random in 20000..32767: below Linux's
 * ephemeral range (32768..60999), so no outgoing connection of another process can take it between
 * the pick and etcd's bind, which a port the OS hands out for `listen(0)` could (a CI run lost
 * that race). Another test picking the same port is caught by etcd's bind or by the identity check.
 */
async function freePort(taken: Set<number>): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 12_768);
    if (taken.has(port)) continue;
    const free = await new Promise<boolean>((resolve) => {
      const s = createServer();
      s.once('error', () => resolve(false));
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
    });
    if (free) {
      taken.add(port);
      return port;
    }
  }
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
  const picked = new Set<number>();
  const [client, peer] = [await freePort(picked), await freePort(picked)];
  // A name of its own: the member list proves the etcd answering on `url` is this one.
  const name = `test-${randomBytes(6).toString('hex')}`;
  const url = `http://127.0.0.1:${client}`;
  const peerUrl = `http://127.0.0.1:${peer}`;
  const args = [
    '--name', name, '--data-dir', join(dir, 'data'),
    '--listen-client-urls', url, '--advertise-client-urls', url,
    '--listen-peer-urls', peerUrl, '--initial-advertise-peer-urls', peerUrl,
    '--initial-cluster', `${name}=${peerUrl}`, '--log-level', 'warn',
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
        if (body.health === 'true') {
          // Healthy, but is it ours? Another test's etcd may hold this port while ours failed to bind it.
          const m = await fetch(`${url}/v3/cluster/member/list`, { method: 'POST', body: '{}', signal: AbortSignal.timeout(1000) });
          const members = ((await m.json()) as { members?: { name?: string }[] }).members ?? [];
          // If not, ours fails its bind and exits, which the check above reports.
          if (members.some((x) => x.name === name) && proc.exitCode === null) return proc;
        }
      } catch {
        // not up yet
      }
      if (Date.now() > deadline) {
        await kill(proc);
        throw new Error(`etcd not healthy within 20 s: ${output}`);
      }
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
