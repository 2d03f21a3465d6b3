/**
 * `/healthz`, `/livez` and `/readyz` as kube-apiserver answers them, and the checks behind them: `ping`,
 * and `etcd` (the store answers: a linearizable read on etcd, a read of the default namespace on SQLite).
 */
import type { ServerResponse } from 'node:http';
import type { Logger } from '../../lib/index.ts';
import { EtcdStorage } from '../storage/etcd.ts';
import type { Storage } from '../storage/index.ts';

/** Named health checks: each answers undefined when healthy, else why not; the flag says whether `/livez` runs it. */
export type HealthChecks = Record<string, [check: () => string | undefined | Promise<string | undefined>, inLivez: boolean]>;

/**
 * `/healthz`, `/livez`, `/readyz` and their `/<endpoint>/<check>` paths, as kube-apiserver answers them:
 * 200 `ok` when every check passes; otherwise 500 with one line a check (`[+]ping ok`, `[-]etcd failed:
 * reason withheld`) and `<endpoint> check failed`. `?verbose` lists the checks also on success
 * (`<endpoint> check passed`); `?exclude=NAME` (repeatable) skips checks. One check alone answers `ok`,
 * or 500 `internal server error: <reason>`; an unknown one 404. `/livez` runs only the checks marked for it.
 */
export async function serveHealth(res: ServerResponse, path: string, query: URLSearchParams, checks: HealthChecks): Promise<void> {
  const [, endpoint = '', name] = path.split('/');
  const send = (code: number, body: string) => {
    res.writeHead(code, { 'Content-Type': 'text/plain; charset=utf-8', 'X-Content-Type-Options': 'nosniff' });
    res.end(body);
  };
  if (name) {
    const entry = Object.hasOwn(checks, name) ? checks[name] : undefined;
    const reason = await entry?.[0]();
    if (!entry) send(404, '404 page not found\n');
    else if (reason === undefined) send(200, 'ok');
    else send(500, `internal server error: ${reason}\n`);
    return;
  }
  const excluded = new Set(query.getAll('exclude'));
  const lines: string[] = [];
  let failed = false;
  for (const [check, [run, inLivez]] of Object.entries(checks)) {
    if (endpoint === 'livez' && !inLivez) continue;
    if (excluded.has(check)) {
      lines.push(`[+]${check} excluded: ok`);
      continue;
    }
    const reason = await run();
    if (reason === undefined) lines.push(`[+]${check} ok`);
    else {
      failed = true;
      lines.push(`[-]${check} failed: reason withheld`);
    }
  }
  if (failed) send(500, `${lines.join('\n')}\n${endpoint} check failed\n`);
  else if (query.has('verbose')) send(200, `${lines.join('\n')}\n${endpoint} check passed\n`);
  else send(200, 'ok');
}

/** Whether `path` is one of the health endpoints (they need no credentials, as in Kubernetes). */
export function isHealthPath(path: string): boolean {
  return path === '/healthz' || path === '/livez' || path === '/readyz' || path.startsWith('/healthz/') || path.startsWith('/livez/') || path.startsWith('/readyz/');
}

/**
 * The checks of the health endpoints as kube-apiserver names them: `etcd` fails while the store does not
 * answer; livez leaves it out (a restart does not bring etcd back; `/livez/etcd` still answers it alone,
 * as in Kubernetes). The first failure and the recovery are logged once each.
 */
export function healthChecks(storage: Storage, log: Logger): HealthChecks {
  let storageFailing = false;
  const storageCheck = async (): Promise<string | undefined> => {
    try {
      if (storage instanceof EtcdStorage) await storage.etcdRevision();
      else await storage.getRaw({ resource: 'namespaces', namespace: '', name: 'default' });
      if (storageFailing) log.info('storage answers again: ready');
      storageFailing = false;
      return undefined;
    } catch (err: unknown) {
      const reason = err instanceof Error ? err.message : String(err);
      if (!storageFailing) log.warn({ err: reason }, 'storage does not answer: not ready (/readyz etcd check failed)');
      storageFailing = true;
      return reason;
    }
  };
  return { ping: [() => undefined, true], etcd: [storageCheck, false] };
}
