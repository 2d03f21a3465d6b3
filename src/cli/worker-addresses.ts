/**
 * The loopback addresses of a local cluster's workers (`kube32-cli up`): worker N listens on the N-th
 * address from the first one, its kubelet endpoint on port 10250 (kube32-sim's default) and its pods'
 * HTTP ports beside it. Two clusters on one computer need different ranges, so `up` checks that each
 * worker's address:10250 is free before it starts anything, and, unless `--first-address` was given,
 * takes the first free range (127.0.0.2, then 127.0.1.2, 127.0.2.2, ...).
 */
import { createServer } from 'node:net';
import { CliError } from './errors.ts';

/** kube32-sim's kubelet port (`--kubelet-port`), which each worker listens on at its address. */
export const KUBELET_PORT = 10250;

/** The first address `up` gives worker-1 by default. */
export const DEFAULT_FIRST_ADDRESS = '127.0.0.2';

/** How many /24 ranges (127.0.0.2, 127.0.1.2, ...) `up` tries when the default one is taken. */
const RANGES_TRIED = 64;

/**
 * The address of worker `i` (1-based): `first`, then the next IPv4 addresses (127.0.0.2, 127.0.0.3, ...).
 * @throws CliError when `first` is not an IPv4 loopback address (127.0.0.0/8), or the range runs past it
 */
export function workerAddress(i: number, first = DEFAULT_FIRST_ADDRESS): string {
  const parts = first.split('.').map(Number);
  if (parts.length !== 4 || parts[0] !== 127 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) {
    throw new CliError(`invalid first worker address "${first}": expected an IPv4 loopback address such as 127.0.0.2`);
  }
  const n = ((parts[1]! << 16) | (parts[2]! << 8) | parts[3]!) + i - 1;
  if (n >= 1 << 24 || (n & 0xff) === 255) throw new CliError(`worker ${i} has no loopback address after ${first}`);
  return `127.${(n >> 16) & 0xff}.${(n >> 8) & 0xff}.${n & 0xff}`;
}

/**
 * Whether something already listens on `address`:`port` (tried by listening there exclusively, then
 * closing at once).
 * @returns true when the port is free
 * @throws Error for a failure other than EADDRINUSE (e.g. EADDRNOTAVAIL on a system without 127.0.0.0/8)
 */
export function portFree(address: string, port: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' ? resolve(false) : reject(err)));
    srv.listen({ host: address, port, exclusive: true }, () => srv.close(() => resolve(true)));
  });
}

/** The first worker address of `workers` whose kubelet port is taken, or undefined when all are free. */
async function firstTaken(workers: number, first: string): Promise<string | undefined> {
  for (let i = 1; i <= workers; i++) {
    const address = workerAddress(i, first);
    if (!(await portFree(address, KUBELET_PORT))) return address;
  }
  return undefined;
}

/** The ranges tried after `first`: the same last byte in the next /24s (127.0.0.2 → 127.0.1.2, 127.0.2.2, ...). */
function nextRanges(first: string): string[] {
  const [a, b, c, d] = first.split('.').map(Number) as [number, number, number, number];
  const out: string[] = [];
  for (let k = 1; k <= RANGES_TRIED; k++) {
    const n = ((b << 8) | c) + k;
    if (n > 0xffff) break;
    out.push(`${a}.${(n >> 8) & 0xff}.${n & 0xff}.${d}`);
  }
  return out;
}

/**
 * The range after `first` (127.0.0.2 → 127.0.1.2), where `up` looks next when a range is taken after its check.
 * @throws CliError when there is none (127.255.255.x)
 */
export function nextWorkerRange(first: string): string {
  const next = nextRanges(first)[0];
  if (next === undefined) throw new CliError(`no worker address range after ${first}: pass --first-address with a free one`);
  return next;
}

/** A range of worker addresses `up` can use. */
export interface WorkerRange {
  /** worker-1's address. */
  first: string;
  /** The range asked for when it was taken and another was picked; undefined when `first` is the one asked for. */
  replaced?: string;
}

/**
 * Finds the worker addresses for `workers` workers from `first`, checking that nothing listens on
 * address:10250 for any of them.
 * @param pick true when `first` is only the default: a taken range is replaced by the next free one
 * @throws CliError when the range is invalid, or taken and `pick` is false (the message names the taken
 *   address and a free `--first-address`), or when no free range is found
 */
export async function chooseWorkerRange(workers: number, first: string, pick: boolean): Promise<WorkerRange> {
  for (let i = 1; i <= workers; i++) workerAddress(i, first); // checks the range, with its message
  if (workers === 0) return { first };
  const taken = await firstTaken(workers, first);
  if (taken === undefined) return { first };
  let free: string | undefined;
  for (const candidate of nextRanges(first)) {
    try {
      for (let i = 1; i <= workers; i++) workerAddress(i, candidate);
    } catch {
      continue;
    }
    if ((await firstTaken(workers, candidate)) === undefined) {
      free = candidate;
      break;
    }
  }
  if (pick && free) return { first: free, replaced: first };
  const why = `${taken}:${KUBELET_PORT} (a worker's kubelet port) is already in use: another cluster runs on this computer?`;
  if (!free) throw new CliError(`${why} No free range of ${workers} worker addresses was found after ${first}: pass --first-address with a free one`);
  throw new CliError(`${why} Pass --first-address ${free} (free for ${workers} worker${workers === 1 ? '' : 's'}), or leave --first-address out to let up pick free addresses`);
}

/** "127.0.0.2" or "127.0.0.2-127.0.0.3": the addresses of `workers` workers from `first`, for messages. */
export function describeRange(workers: number, first: string): string {
  return workers <= 1 ? first : `${first}-${workerAddress(workers, first)}`;
}
