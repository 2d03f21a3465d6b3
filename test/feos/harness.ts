// Starts real feosd processes on temporary state dirs for the FeOS suites, and drives feosctl.
import { spawn, type ChildProcess, execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import { makeClient } from '../../src/feos/api/index.ts';
import { PodService, type PodInfo, PodState } from '../../src/feos/gen/feos/pod/v1/pod_pb.js';
import { HostService } from '../../src/feos/gen/feos/host/v1/host_pb.js';

const REPO = new URL('../../', import.meta.url).pathname;
export const FEOSD = join(REPO, 'bin/feosd.js');
export const FEOSCTL = join(REPO, 'bin/feosctl.js');

/** A feosd process and its clients. */
export interface FeosdProcess {
  child: ChildProcess;
  stateDir: string;
  runDir: string;
  socket: string;
  stderr: () => string;
  pods: ReturnType<typeof makeClient<typeof PodService.method>>;
  host: ReturnType<typeof makeClient<typeof HostService.method>>;
  /** Ends it (SIGTERM, or the signal given) and waits for its exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/** A temporary directory (short: unix socket paths stay under 108 bytes), removed by `cleanup`. */
export function tempDir(prefix: string): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * Starts feosd and waits until its socket answers (or `waitServing` false: returns at once).
 * @param opts.extra more flags
 * @param opts.env its environment @default process.env
 */
export async function startFeosd(
  base: string,
  opts: { guestDir?: string; extra?: string[]; waitServing?: boolean; runDir?: string; netns?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<FeosdProcess> {
  const stateDir = join(base, 'state');
  const runDir = opts.runDir ?? join(base, 'run');
  const args = [FEOSD, '--state-dir', stateDir, '--run-dir', runDir, '--guest-dir', opts.guestDir ?? join(base, 'guest'), '--accel', 'tcg', ...(opts.extra ?? [])];
  const env = opts.env ?? process.env;
  const child = opts.netns
    ? spawn('ip', ['netns', 'exec', opts.netns, process.execPath, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env })
    : spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  child.stdout!.resume();
  const socket = join(runDir, 'api.sock');
  const pods = makeClient(PodService, `unix:${socket}`);
  const host = makeClient(HostService, `unix:${socket}`);
  const exited = once(child, 'exit');
  const proc: FeosdProcess = {
    child,
    stateDir,
    runDir,
    socket,
    stderr: () => err,
    pods,
    host,
    stop: async (signal = 'SIGTERM') => {
      pods.grpc.close();
      host.grpc.close();
      if (child.exitCode === null && child.signalCode === null) {
        child.kill(signal);
        await exited;
      }
    },
  };
  if (opts.waitServing === false) return proc;
  // Wait on feosd's own word that it serves, bounded.
  const deadline = Date.now() + 60_000;
  while (!err.includes('"feosd serving"')) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`feosd exited ${child.exitCode ?? child.signalCode}: ${err}`);
    if (Date.now() > deadline) throw new Error(`feosd did not serve within 60 s: ${err}`);
    // The next line, its exit (which writes nothing more: waiting on 'data' alone would hang), or the deadline.
    const left = AbortSignal.timeout(Math.max(1, deadline - Date.now()));
    await Promise.race([once(child.stderr!, 'data', { signal: left }).catch(() => undefined), exited]);
  }
  if (!existsSync(socket)) throw new Error(`feosd said it serves but ${socket} is missing`);
  return proc;
}

/** Runs feosctl against a socket; resolves with its exit code and output. */
export function feosctl(socket: string, args: string[], timeoutMs = 120_000): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [FEOSCTL, '--socket', socket, ...args], { timeout: timeoutMs }, (err, stdout, stderr) => {
      const code = err ? ((err as { code?: number }).code ?? 1) : 0;
      resolve({ code: typeof code === 'number' ? code : 1, stdout, stderr });
    });
  });
}

/** Watches a pod's events until `done` holds for it or `timeoutMs` passes. */
export function waitForPod(p: FeosdProcess, id: string, done: (pod: PodInfo) => boolean, timeoutMs: number): Promise<PodInfo> {
  return new Promise((resolve, reject) => {
    const stream = p.pods.watchPodEvents({ podId: id });
    const timer = setTimeout(() => {
      stream.cancel();
      reject(new Error(`pod ${id}: not there within ${timeoutMs} ms`));
    }, timeoutMs);
    stream.on('data', (ev: { pod?: PodInfo }) => {
      if (ev.pod && done(ev.pod)) {
        clearTimeout(timer);
        stream.cancel();
        resolve(ev.pod);
      }
    });
    stream.on('error', (err: { code?: number }) => {
      if (err.code === 1) return;
      clearTimeout(timer);
      reject(err);
    });
  });
}

export { PodState };

/** Polls `probe` (an API call) every 200 ms until it returns a value, bounded by `timeoutMs`; the last error is in the failure. */
export async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err: unknown) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * Gives a network namespace what the pods' network needs of a node (docs/feos/network.md's recipe): a
 * veth pair that leads nowhere, `feos-out`, with the default IPv4 and IPv6 routes through it.
 * @throws Error from `ip` when a step fails
 */
export function routeOut(ns: string): void {
  for (const args of [
    ['link', 'add', 'feos-out', 'type', 'veth', 'peer', 'name', 'feos-out-end'],
    ['link', 'set', 'feos-out', 'up'],
    ['link', 'set', 'feos-out-end', 'up'],
    ['route', 'add', 'default', 'dev', 'feos-out'],
    ['-6', 'route', 'add', 'default', 'dev', 'feos-out'],
  ]) {
    execFileSync('ip', ['-n', ns, ...args], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 10_000 });
  }
}
