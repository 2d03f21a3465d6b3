/**
 * `GET /containerLogs/<ns>/<pod>/<container>` (what `kubectl logs` reaches through the API server's
 * node proxy): `follow`, `tailLines`, `sinceSeconds`, `sinceTime`, `timestamps`, `previous`, `limitBytes`.
 */
import { once } from 'node:events';
import type { ServerResponse } from 'node:http';
import type { Logger } from '../../lib/index.ts';
import { errorMessage } from '../client.ts';
import type { FoundContainer } from './checkpoint.ts';
import { badRequest } from './status.ts';

/** The RFC 3339 timestamp with nanoseconds that kubelets put before log lines (`--timestamps`). */
export function logTimestamp(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000000Z');
}

/** The query of a log request, read and checked. */
interface LogQuery {
  tail?: number;
  sinceTime?: number;
  limitBytes?: number;
  previous: boolean;
  timestamps: boolean;
  follow: boolean;
}

/**
 * Reads the log query.
 * @throws EndpointError 400 for a count that is not a whole number of 0 or more, or a `sinceTime` that is not RFC 3339
 */
export function logQuery(q: URLSearchParams): LogQuery {
  const flag = (name: string) => q.get(name) === 'true' || q.get(name) === '1';
  const int = (name: string): number | undefined => {
    const v = q.get(name);
    if (v === null || v === '') return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw badRequest(`${name} must be a whole number of 0 or more: current value is "${v}"`);
    return n;
  };
  const tail = int('tailLines');
  const sinceSeconds = int('sinceSeconds');
  const limitBytes = int('limitBytes');
  let sinceTime: number | undefined;
  const st = q.get('sinceTime');
  if (st) {
    sinceTime = Date.parse(st);
    if (Number.isNaN(sinceTime)) throw badRequest(`sinceTime must be an RFC 3339 time: current value is "${st}"`);
  }
  if (sinceSeconds !== undefined) sinceTime = Date.now() - sinceSeconds * 1000;
  const previous = flag('previous');
  return {
    ...(tail !== undefined ? { tail } : {}),
    ...(sinceTime !== undefined ? { sinceTime } : {}),
    ...(limitBytes !== undefined ? { limitBytes } : {}),
    previous,
    timestamps: flag('timestamps'),
    follow: flag('follow') && !previous,
  };
}

/** Streams a container's log lines as plain text. */
export async function serveLogs(res: ServerResponse, q: LogQuery, found: FoundContainer, at: { pod: string; container: string }, log: Logger): Promise<void> {
  const { runner } = found;
  const inst = q.previous ? runner.previous : runner.current;
  if (!inst) {
    const state = runner.view().state;
    throw badRequest(
      q.previous
        ? `previous terminated container "${at.container}" in pod "${at.pod}" not found`
        : `container "${at.container}" in pod "${at.pod}" is waiting to start: ${state.kind === 'waiting' ? state.reason : 'ContainerCreating'}`,
    );
  }
  const ac = new AbortController();
  res.on('close', () => ac.abort());
  res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-cache' });
  res.flushHeaders();
  let sent = 0;
  try {
    const opts = { ...(q.tail !== undefined ? { tail: q.tail } : {}), ...(q.sinceTime !== undefined ? { sinceTime: q.sinceTime } : {}), follow: q.follow, signal: ac.signal };
    for await (const entry of inst.logs(opts)) {
      let text = `${q.timestamps ? `${logTimestamp(entry.time)} ` : ''}${entry.line}\n`;
      if (q.limitBytes !== undefined && sent + Buffer.byteLength(text) > q.limitBytes) {
        text = Buffer.from(text).subarray(0, q.limitBytes - sent).toString();
        res.write(text);
        break;
      }
      sent += Buffer.byteLength(text);
      if (!res.write(text)) await Promise.race([once(res, 'drain'), once(res, 'close')]);
      if (res.destroyed) break;
    }
  } catch (err: unknown) {
    if (!ac.signal.aborted) log.warn({ err: errorMessage(err) }, 'log stream failed');
  }
  if (!res.destroyed) res.end();
}
