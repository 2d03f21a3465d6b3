/**
 * A recording stand-in for the API server, for kube32-cli tests that check what the CLI sends and how
 * it reports what it gets back (kubeconfig handling, errors, refusals) without a whole cluster. Each
 * route answers a fixed JSON; requests are recorded with their bodies. Closed in `t.after`.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';

/** One request the fake server saw. */
export interface Seen {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** A route's answer: a status and a JSON body, or a function of the request. */
export type Answer = { status: number; body: unknown } | ((req: Seen) => { status: number; body: unknown });

/**
 * Starts the fake server on 127.0.0.1:0.
 * @param routes keyed by `METHOD path` (the path without its query); anything else gets a 404 Status
 * @returns its URL, what it saw, and `kubeconfig(opts)` which writes a kubeconfig file for it
 */
export async function startFakeApiServer(t: TestContext, routes: Record<string, Answer>) {
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      const s: Seen = { method: req.method ?? '', path: url.pathname + url.search, headers: req.headers, body: Buffer.concat(chunks) };
      seen.push(s);
      const route = routes[`${req.method} ${url.pathname}`];
      const answer = typeof route === 'function' ? route(s) : (route ?? {
        status: 404,
        body: { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'NotFound', code: 404, message: `the server could not find the requested resource` },
      });
      res.writeHead(answer.status, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(answer.body));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const dir = mkdtempSync(join(tmpdir(), 'kube32-cli-test-'));
  t.after(() => {
    server.closeAllConnections();
    server.close();
    rmSync(dir, { recursive: true, force: true });
  });
  let n = 0;
  return {
    url,
    seen,
    dir,
    /** Writes a kubeconfig with one context (`name`) for this server and answers its path. */
    kubeconfig(opts: { context?: string; namespace?: string; server?: string; token?: string } = {}): string {
      const ctx = opts.context ?? 'fake';
      const path = join(dir, `kubeconfig-${n++}`);
      writeFileSync(
        path,
        [
          'apiVersion: v1',
          'kind: Config',
          'clusters:',
          `- name: ${ctx}-cluster`,
          '  cluster:',
          `    server: ${opts.server ?? url}`,
          '    insecure-skip-tls-verify: true',
          'users:',
          `- name: ${ctx}-user`,
          '  user:',
          `    token: ${opts.token ?? 'tok'}`,
          'contexts:',
          `- name: ${ctx}`,
          '  context:',
          `    cluster: ${ctx}-cluster`,
          `    user: ${ctx}-user`,
          ...(opts.namespace ? [`    namespace: ${opts.namespace}`] : []),
          `current-context: ${ctx}`,
          '',
        ].join('\n'),
      );
      return path;
    },
  };
}

/** A metav1.Status failure body. */
export function status(code: number, reason: string, message: string) {
  return { status: code, body: { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason, code, message } };
}
