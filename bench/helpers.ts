/**
 * Helpers shared by the benchmarks that drive a real API server from their own process
 * (bench/apiserver, bench/list; bench/scale its CPU time): a keep-alive HTTPS caller on a test API server's URL and admin
 * token, a pool of concurrent calls, percentiles, and a process's CPU time.
 */
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:https';
import type { TestApiServer } from '../test/helpers/apiserver.ts';

/** One HTTPS call: method, path, a JSON body, its Content-Type, the Accept header; `read` false drops the body. */
export type Call = (method: string, path: string, body?: unknown, type?: string, accept?: string, read?: boolean) => Promise<{ status: number; text: string }>;

/** A caller on `api`'s URL and admin token, over keep-alive connections (destroy the agent when done). */
export function caller(api: TestApiServer): { call: Call; agent: Agent } {
  const agent = new Agent({ keepAlive: true, maxSockets: 64, ca: Buffer.from(api.kubeConfig.getCurrentCluster()!.caData!, 'base64') });
  const u = new URL(api.url);
  const tok = api.kubeConfig.getCurrentUser()!.token!;
  return { agent, call: (method, path, body, type = 'application/json', accept = 'application/json', read = true) => callOn(u, tok, agent, method, path, body, type, accept, read) };
}

/** One HTTPS call to `url` with a bearer `token` on `agent`; answers the status and (when `read`) the body's text. */
export function callOn(url: URL, token: string, agent: Agent, method: string, path: string, body?: unknown, type = 'application/json', accept = 'application/json', read = true): Promise<{ status: number; text: string }> {
  const data = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: url.hostname, port: url.port, path, method, agent, headers: { Authorization: `Bearer ${token}`, Accept: accept, ...(data ? { 'Content-Type': type, 'Content-Length': Buffer.byteLength(data) } : {}) } },
      (res) => {
        let text = '';
        if (read) {
          res.setEncoding('utf8');
          res.on('data', (d: string) => {
            text += d;
          });
        } else res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

/** Runs `fn(0..n-1)` on `concurrency` lanes; answers the seconds it took. */
export async function pool(n: number, concurrency: number, fn: (i: number) => Promise<void>): Promise<number> {
  let next = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) await fn(next++);
    }),
  );
  return (performance.now() - start) / 1000;
}

/** The `p`th percentile of `xs` (the sample at index floor(p/100 × n); with 10 samples p99 is the largest). */
export function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

/** CPU seconds (user + system, every thread) a process has used; `/proc/<pid>/stat` counts in 1/100 s. */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}
