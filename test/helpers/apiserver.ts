/**
 * A real API server for tests: `node bin/kube32-cli.js apiserver` as a child process on a free
 * port (`--port 0`), HTTPS with its own CA, in a temporary data dir; with the admin's kubeconfig,
 * a client-node `KubeConfig`, a `kubectl` runner (fresh `--cache-dir` each call) and kubelet
 * kubeconfigs. `stop()` (registered on `t.after` when a test context is given) kills the process
 * and removes the directory.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { IncomingHttpHeaders } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { createInterface } from 'node:readline';
import type { TestContext } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { issueNodeKubeconfig } from '../../src/apiserver/index.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

/** What `startApiServer` answers. */
export interface TestApiServer {
  /** `https://127.0.0.1:PORT` */
  url: string;
  port: number;
  /** The port of this process alone (`--peer-advertise-port`), when it has one. */
  peerPort?: number;
  dataDir: string;
  /** The admin kubeconfig's path. */
  kubeconfigPath: string;
  /** A client-node KubeConfig for the admin. */
  kubeConfig: KubeConfig;
  /** Runs the real kubectl with the admin kubeconfig and a fresh cache dir; `env` adds to its environment (`KUBE_FEATURE_...` gates). */
  kubectl(args: string[], opts?: { input?: string; timeoutMs?: number; env?: Record<string, string> }): Promise<{ code: number; stdout: string; stderr: string }>;
  /** Writes (once) and answers the path of a kubelet kubeconfig for `nodeName`. */
  nodeKubeconfig(nodeName: string): string;
  /** Standard error of the server so far (its JSON logs). */
  logs(): string;
  proc: ChildProcess;
  /** Kills the server (SIGTERM, then SIGKILL after 5 s) and removes its data dir unless `keepData`. */
  stop(opts?: { keepData?: boolean }): Promise<void>;
}

/** Options of `startApiServer`. */
export interface StartOptions {
  /** Extra flags for `kube32-cli apiserver`. */
  args?: string[];
  /** Reuse this data dir (a restart); it is then not removed by stop(). */
  dataDir?: string;
  /** Environment additions (LOG_LEVEL...). */
  env?: Record<string, string>;
  /** The source tree whose `bin/kube32-cli.js` runs (a benchmark's `--compare` tree); this one by default. */
  root?: string;
}

/**
 * Starts an API server process and waits until it listens (at most 60 s: its start, PKI included,
 * took 8.7-12.8 s on a loaded machine).
 * @param t when given, `stop()` runs in `t.after`
 * @throws Error with the server's standard error when it exits or does not come up
 */
export async function startApiServer(t?: TestContext, opts: StartOptions = {}): Promise<TestApiServer> {
  const ownDir = opts.dataDir === undefined;
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'kube32-apiserver-'));
  const proc = spawn(process.execPath, [join(opts.root ?? ROOT, 'bin/kube32-cli.js'), 'apiserver', '--data-dir', dataDir, '--port', '0', ...(opts.args ?? [])], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn', ...opts.env },
  });
  let stderr = '';
  proc.stderr!.setEncoding('utf8');
  proc.stderr!.on('data', (d: string) => {
    stderr += d;
  });
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const stopped = { done: false };
  const stop = async (o: { keepData?: boolean } = {}) => {
    if (!stopped.done) {
      stopped.done = true;
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGTERM');
        const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }
    }
    if (ownDir && !o.keepData) rmSync(dataDir, { recursive: true, force: true });
  };
  t?.after(() => stop());
  const lines = createInterface(proc.stdout!);
  const first = await Promise.race([
    new Promise<string>((resolve) => lines.once('line', resolve)),
    exited.then((code) => {
      throw new Error(`the API server exited (code ${code}) before it listened:\n${stderr}`);
    }),
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`the API server did not listen within 60 s:\n${stderr}`)), 60_000).unref()),
  ]).catch(async (err: unknown) => {
    await stop();
    throw err;
  });
  const info = JSON.parse(first) as { url: string; port: number; peerPort?: number; kubeconfig: string };
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(info.kubeconfig);
  const cacheRoot = mkdtempSync(join(dataDir, 'kubectl-cache-'));
  let n = 0;
  return {
    url: info.url,
    port: info.port,
    ...(info.peerPort !== undefined ? { peerPort: info.peerPort } : {}),
    dataDir,
    kubeconfigPath: info.kubeconfig,
    kubeConfig,
    proc,
    logs: () => stderr,
    kubectl(args, o = {}) {
      return new Promise((resolve) => {
        const child = execFile(
          'kubectl',
          ['--kubeconfig', info.kubeconfig, '--cache-dir', join(cacheRoot, String(n++)), ...args],
          { timeout: o.timeoutMs ?? 60_000, maxBuffer: 64 * 1024 * 1024, env: { ...process.env, ...o.env, KUBECONFIG: info.kubeconfig } },
          (err, stdout, stderr_) => {
            const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : 1) : 0;
            resolve({ code, stdout: String(stdout), stderr: String(stderr_) });
          },
        );
        if (o.input !== undefined) child.stdin!.end(o.input);
        else child.stdin?.end();
      });
    },
    nodeKubeconfig: (nodeName) => issueNodeKubeconfig(dataDir, nodeName),
    stop,
  };
}

/** A raw HTTPS answer: status, headers, the body's bytes and text, and the body parsed as JSON on demand. */
export interface RawReply {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  text: string;
  json(): Record<string, unknown>;
}

/**
 * A raw HTTPS request to `api`, for what a client library would not send or would hide: `body` is sent as is
 * (bytes or a string) or as JSON; `opts.type` its Content-Type (default JSON); `opts.token` the bearer token
 * (default the admin's; null for none); `opts.accept` the Accept header (a Table's, say). Rejects when no answer comes
 * within `opts.timeoutMs` (default 20 s).
 */
export function rawRequest(
  api: TestApiServer,
  method: string,
  path: string,
  body?: unknown,
  opts: { type?: string; token?: string | null; timeoutMs?: number; accept?: string } = {},
): Promise<RawReply> {
  const ca = Buffer.from(api.kubeConfig.getCurrentCluster()!.caData!, 'base64');
  const data = body === undefined ? undefined : body instanceof Uint8Array ? Buffer.from(body) : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
  const u = new URL(api.url + path);
  const headers: Record<string, string | number> = {};
  const token = opts.token === undefined ? api.kubeConfig.getCurrentUser()!.token : opts.token;
  if (token) headers.Authorization = `Bearer ${token}`;
  if (opts.accept) headers.Accept = opts.accept;
  if (data) {
    headers['Content-Type'] = opts.type ?? 'application/json';
    headers['Content-Length'] = data.length;
  }
  const timeoutMs = opts.timeoutMs ?? 20_000;
  return new Promise((resolve, reject) => {
    const req = httpsRequest({ host: u.hostname, port: u.port, path: u.pathname + u.search, method, ca, headers, timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const b = Buffer.concat(chunks);
        const text = b.toString();
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: b, text, json: () => JSON.parse(text) as Record<string, unknown> });
      });
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(data);
  });
}
