/**
 * What every feosctl command stands on: the gRPC target and deadline from the global flags, the `-o`
 * option, and the mapping of a failed call to feosctl's `<CODE_NAME>: <message>` (exit 1).
 */
import { type Command, Option } from 'commander';
import { codeName, isVmBusy } from '../api/index.ts';
import { table } from './output.ts';
import type { ClusterTunnel } from './through-cluster.ts';

/** Thrown for a gRPC error: printed with its code name (`feosctl: <CODE_NAME>: <message>`), exit 1. */
export class CallFailed extends Error {}

/** What the command groups take from feosctl's main: its target, deadline, error mapping and printing. */
export interface CtlContext {
  /** The gRPC target: `unix:PATH` or `host:port`. */
  target: () => string;
  /** Each call's deadline (--timeout). */
  deadline: () => Date;
  /** Runs a call; a gRPC error becomes feosctl's `<CODE>: <message>` (exit 1). */
  call: <T>(fn: () => Promise<T>) => Promise<T>;
  /** The `-o table|json|yaml` option; with `wide`, `-o wide` too (pod commands: more columns). */
  output: (o?: { wide?: boolean }) => Option;
  /** Columns padded as kubectl pads them. */
  table: (rows: string[][]) => string;
}

/**
 * Whether an UNAVAILABLE's details are grpc-js's own failure to reach feosd ("No connection
 * established. Last error: connect ENOENT ..."), as opposed to an UNAVAILABLE that feosd answered
 * (a store that failed with ENOENT, say), which feosctl shows as it is.
 */
export function isConnectFailure(details: string): boolean {
  return /^No connection established\b/.test(details) || /^(?:connect )?(?:ENOENT|ECONNREFUSED|EACCES)\b/.test(details);
}

/** How else feosctl reaches a feosd: said after each failure to connect. */
const ELSEWHERE = 'to reach another feosd, pass --socket PATH (its <run-dir>/api.sock), --tcp HOST:PORT or --kubeconfig FILE --node NAME';

/**
 * feosctl's message for a failure to reach feosd ({@link isConnectFailure}): the address it tried, why
 * (no socket, permission denied, nothing listening or answering) and how to point it elsewhere.
 * @param details grpc-js's details (`No connection established. Last error: connect EACCES /run/feos/api.sock ...`)
 */
export function connectFailureMessage(details: string, o: { socket: string; tcp?: string }): string {
  if (o.tcp) return `UNAVAILABLE: is feosd running? nothing answers at ${o.tcp}; ${ELSEWHERE}`;
  if (/\bEACCES\b/.test(details)) {
    return `UNAVAILABLE: permission denied on the socket ${o.socket}: it is for root and the group feos (run feosctl as root or as a member of feos); ${ELSEWHERE}`;
  }
  const why = /\bENOENT\b/.test(details) ? `no socket at ${o.socket}` : `nothing listens on ${o.socket}`;
  return `UNAVAILABLE: is feosd running? ${why}; ${ELSEWHERE}`;
}

/**
 * The context of `program`'s commands, read from its global options (`--socket`, `--tcp`, `--timeout`)
 * when a command runs; with a tunnel through the cluster (`--node`), its loopback end is the target.
 */
export function ctlContext(program: Command, tunnel: () => ClusterTunnel | undefined = () => undefined): CtlContext {
  const target = () => {
    const o = program.opts<{ socket: string; tcp?: string }>();
    const t = tunnel();
    return t ? t.target : o.tcp ? o.tcp : `unix:${o.socket}`;
  };
  const deadline = () => new Date(Date.now() + program.opts<{ timeout: number }>().timeout * 1000);
  const output = (w?: { wide?: boolean }) =>
    w?.wide
      ? new Option('-o, --output <format>', 'table, wide (more columns), json or yaml').choices(['table', 'wide', 'json', 'yaml']).default('table')
      : new Option('-o, --output <format>', 'table, json or yaml').choices(['table', 'json', 'yaml']).default('table');
  const call = async <T>(fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (err: unknown) {
      const e = err as { code?: number; details?: string };
      // grpc-js's words for a feosd that is not there ("No connection established. Last error: ...
      // Resolution note: ") say the same in the operator's terms.
      const o = program.opts<{ socket: string; tcp?: string }>();
      // Only grpc-js's own failure to connect: feosd's UNAVAILABLE answers (a store that failed with
      // ENOENT, say) are shown as they are.
      const refused = e.code === 14 ? tunnel()?.lastError() : undefined;
      if (refused) throw new CallFailed(`${refused.code}: ${refused.message}`);
      if (e.code === 14 && isConnectFailure(e.details ?? '')) throw new CallFailed(connectFailureMessage(e.details ?? '', o));
      if (typeof e.code === 'number') {
        throw new CallFailed(`${codeName(e.code)}: ${e.details ?? ''}${isVmBusy(err) ? ' (VmBusy)' : ''}`);
      }
      throw err;
    }
  };
  return { target, deadline, call, output, table };
}
