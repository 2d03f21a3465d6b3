/**
 * Helpers of test/etcd/: a `kube32-cli apiserver --storage etcd` process on its own loopback address
 * (stopped and its data dir removed in `t.after`), an HTTPS request with the cluster CA, and the
 * `default/kubernetes` Endpoints as `ip:port` strings.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { TestContext } from 'node:test';
import { parse as parseYaml } from 'yaml';
import { CLI } from '../apiserver-etcd/control-plane.ts';
import { claimLoopbackRange } from '../helpers/ports.ts';

/** A running API server process. */
export interface ApiServerProcess {
  proc: ChildProcess;
  dataDir: string;
  url: string;
  /** Its advertised (and bound) address. */
  address: string;
  kubeconfig: string;
  /** The admin token and CA of its kubeconfig. */
  token: string;
  caPem: string;
  exited: Promise<number | null>;
  logs(): string;
}

/** A loopback /24 prefix (`127.X.Y`) claimed for this process, so that parallel suites do not share addresses. */
export function loopbackPrefix(): Promise<string> {
  return claimLoopbackRange();
}

/**
 * Starts `kube32-cli apiserver --storage etcd --etcd-endpoints <etcdUrl> --bind <address> --port 0`
 * (plus `extraArgs`) and waits for its JSON line.
 * @param opts.dataDir an existing data dir (removed at cleanup too); default a new temp dir
 * @throws Error with its stderr when it exits first
 */
export async function startApiServer(t: TestContext, etcdUrl: string, address: string, opts: { dataDir?: string; extraArgs?: string[] } = {}): Promise<ApiServerProcess> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'k32-identity-'));
  const proc = spawn(process.execPath, [CLI, 'apiserver', '--storage', 'etcd', '--etcd-endpoints', etcdUrl, '--data-dir', dataDir, '--bind', address, '--port', '0', ...(opts.extraArgs ?? [])], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn' },
  });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-8000);
  });
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  t.after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    await exited;
    rmSync(dataDir, { recursive: true, force: true });
  });
  const line = await Promise.race([
    new Promise<string>((resolve) => createInterface(proc.stdout!).once('line', resolve)),
    exited.then((code) => {
      throw new Error(`apiserver on ${address} exited ${String(code)}: ${stderr}`);
    }),
  ]);
  const { url, kubeconfig } = JSON.parse(line) as { url: string; kubeconfig: string };
  const cfg = parseYaml(readFileSync(kubeconfig, 'utf8')) as { clusters: { cluster: { 'certificate-authority-data': string } }[]; users: { user: { token: string } }[] };
  return {
    proc,
    dataDir,
    url,
    address,
    kubeconfig,
    token: cfg.users[0]!.user.token,
    caPem: Buffer.from(cfg.clusters[0]!.cluster['certificate-authority-data'], 'base64').toString(),
    exited,
    logs: () => stderr,
  };
}

/** An HTTPS request verified against `caPem`, bounded to 20 s; answers the status and the parsed JSON body. */
export function apiRequest(url: string, opts: { caPem: string; token: string; method?: string; body?: unknown }): Promise<{ status: number; body: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const data = opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body));
    const req = request(url, {
      method: opts.method ?? 'GET',
      ca: opts.caPem,
      headers: { Authorization: `Bearer ${opts.token}`, Accept: 'application/json', ...(data ? { 'Content-Type': 'application/json', 'Content-Length': data.length } : {}) },
      timeout: 20_000,
    });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        try {
          resolve({ status: res.statusCode ?? 0, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} });
        } catch {
          resolve({ status: res.statusCode ?? 0, body: { text } });
        }
      });
    });
    req.on('timeout', () => req.destroy(new Error(`${url}: no answer within 20 s`)));
    req.on('error', reject);
    req.end(data);
  });
}

/** The addresses of `default/kubernetes` Endpoints, as sorted `ip:port` strings. */
export async function kubernetesEndpoints(server: ApiServerProcess): Promise<string[]> {
  const r = await apiRequest(`${server.url}/api/v1/namespaces/default/endpoints/kubernetes`, server);
  if (r.status !== 200) throw new Error(`GET endpoints/kubernetes: ${r.status} ${JSON.stringify(r.body)}`);
  const subsets = (r.body.subsets ?? []) as { addresses?: { ip: string }[]; ports?: { port: number }[] }[];
  return subsets.flatMap((s) => (s.addresses ?? []).flatMap((a) => (s.ports ?? []).map((p) => `${a.ip}:${p.port}`))).sort();
}
