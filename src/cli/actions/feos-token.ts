/**
 * `kube32-cli feos token create|list|delete` (docs/feos/fleet.md, "Join tokens"): join tokens as
 * kube-system Secrets through the cluster's API, with the kubeconfig chosen as kubectl chooses it. The
 * pin is computed from the kubeconfig's certificate authority, the cluster CA that issues the port for
 * nodes' certificate.
 */
import { readFileSync } from 'node:fs';
import { CoordinationV1Api, CoreV1Api } from '@kubernetes/client-node';
import { createJoinToken, deleteJoinToken, listJoinTokens, listFleetInstances, caPin, type JoinToken } from '../../fleet/index.ts';
import { humanDuration, parseDuration } from '../../lib/index.ts';
import { CliError } from '../errors.ts';
import { loadClusterTarget } from '../kubeconfig.ts';
import { formatObject, formatTable } from '../output.ts';


/** The shortest and the longest --ttl but 0 (no expiry): a minute, ten years. */
const MIN_TTL_MS = 60_000;
const MAX_TTL_MS = 87_600 * 3_600_000;
/** The flags of the token commands. */
export interface TokenFlags {
  kubeconfig?: string;
  context?: string;
  ttl?: string;
  description?: string;
  output?: string;
}

/** The client-node error as kubectl prints it, or the error itself. */
function apiError(err: unknown, what: string): Error {
  const e = err as { code?: number; body?: unknown; message?: string };
  if (typeof e.code === 'number') {
    let status: { message?: string; reason?: string } | undefined;
    try {
      status = typeof e.body === 'string' ? (JSON.parse(e.body) as { message?: string; reason?: string }) : (e.body as { message?: string; reason?: string });
    } catch {
      status = undefined;
    }
    if (status?.message) return new CliError(`Error from server${status.reason ? ` (${status.reason})` : ''}: ${status.message}`);
    return new CliError(`Error from server: ${what}: HTTP ${e.code}`);
  }
  const msg = e.message ?? String(err);
  if (/ECONNREFUSED/.test(msg)) return new CliError(`${what}: the connection to the server was refused - is the control plane running? (${msg})`);
  return new CliError(`${what}: ${msg}`);
}

function target(flags: TokenFlags): { core: CoreV1Api; coord: CoordinationV1Api; caPem: string } {
  const t = loadClusterTarget(flags);
  const cluster = t.kubeConfig.getCurrentCluster();
  let caPem = '';
  if (cluster?.caData) caPem = Buffer.from(cluster.caData, 'base64').toString('utf8');
  else if (cluster?.caFile) caPem = readFileSync(cluster.caFile, 'utf8');
  return { core: t.kubeConfig.makeApiClient(CoreV1Api), coord: t.kubeConfig.makeApiClient(CoordinationV1Api), caPem };
}

/**
 * `feos token create`: prints `feos-join-<id>-<secret>.<pin>` and a line on standard error with its expiry.
 * @throws CliError for a bad --ttl, a kubeconfig without the cluster's CA, or the API's refusal
 */
export async function tokenCreate(flags: TokenFlags): Promise<void> {
  let ttlMs: number;
  try {
    ttlMs = flags.ttl === '0' ? 0 : parseDuration(flags.ttl ?? '24h');
    if (!(ttlMs >= 0)) throw new RangeError('must not be negative');
    // A token must live long enough to be written to a node and read by its feosd, and its expiration must be a
    // date RFC 3339 can write (a four-digit year).
    if (ttlMs > 0 && ttlMs < MIN_TTL_MS) throw new RangeError('at least 1m, so that a node can use it');
    if (ttlMs > MAX_TTL_MS) throw new RangeError('at most 87600h (ten years)');
  } catch (err: unknown) {
    throw new CliError(`--ttl ${JSON.stringify(flags.ttl)}: ${err instanceof Error ? err.message : String(err)} (want a duration such as 24h or 30m, or 0 for a token that does not expire)`);
  }
  const { core, coord, caPem } = target(flags);
  if (!caPem) throw new CliError("the kubeconfig names no certificate authority for the cluster: the token's pin is the cluster CA's; use the kubeconfig the control plane wrote");
  let pin: string;
  try {
    pin = caPin(caPem);
  } catch (err: unknown) {
    throw new CliError(`the kubeconfig's certificate authority does not parse: ${err instanceof Error ? err.message : String(err)}`);
  }
  let made: Awaited<ReturnType<typeof createJoinToken>>;
  try {
    made = await createJoinToken(core, ttlMs, flags.description ?? '');
  } catch (err: unknown) {
    throw apiError(err, 'creating the token');
  }
  process.stdout.write(`feos-join-${made.tokenSecret}.${pin}\n`);
  process.stderr.write(`token ${made.id} created, ${made.expiration ? `valid until ${made.expiration}` : 'without expiry'}; put it in the node's --join-token-file (0600)\n`);
  // Where the node joins: the instances serving a port for nodes. None means a control plane started without
  // --feos-listen, where the token can never be used: said now rather than by the node's log later.
  const instances = await listFleetInstances(coord).catch(() => undefined);
  if (instances && instances.length === 0) {
    process.stderr.write('warning: no control plane serves FeOS nodes now (none was started with --feos-listen HOST:PORT): a node cannot join with this token until one does\n');
  } else if (instances) {
    process.stderr.write(`nodes join at ${instances.map((i) => i.address).join(', ')} (feosd --control-plane)\n`);
  }
}

function ttlOf(t: JoinToken, now: number): string {
  if (!t.expiration) return '<forever>';
  const left = Date.parse(t.expiration) - now;
  return left <= 0 ? '<expired>' : humanDuration(left);
}

/** `feos token list`: a table like kubeadm's, or `-o json|yaml` (a List of the tokens, secrets never shown). */
export async function tokenList(flags: TokenFlags): Promise<void> {
  const format = flags.output ?? '';
  if (format !== '' && format !== 'json' && format !== 'yaml') {
    throw new CliError(`unable to match a printer suitable for the output format "${format}", allowed formats are: json,yaml`);
  }
  const { core } = target(flags);
  let tokens: JoinToken[];
  try {
    tokens = await listJoinTokens(core);
  } catch (err: unknown) {
    throw apiError(err, 'listing the tokens');
  }
  if (format) {
    process.stdout.write(formatObject({ kind: 'List', items: tokens.map((t) => ({ id: t.id, expiration: t.expiration || null, description: t.description, usages: t.usages, groups: t.groups, created: t.created })) }, format));
    return;
  }
  if (tokens.length === 0) {
    process.stderr.write('No join tokens found.\n');
    return;
  }
  const now = Date.now();
  process.stdout.write(formatTable(['ID', 'TTL', 'EXPIRES', 'USAGES', 'DESCRIPTION'], tokens.map((t) => [t.id, ttlOf(t, now), t.expiration || '<never>', t.usages.join(',') || '<none>', t.description || '<none>'])));
}

/** `feos token delete ID...`: deletes each; the ones not found are named in one NotFound error (exit 1) once the others are deleted. */
export async function tokenDelete(ids: string[], flags: TokenFlags): Promise<void> {
  for (const id of ids) {
    if (!/^[a-z0-9]{6}$/.test(id)) {
      throw new CliError(`token ID ${JSON.stringify(id)}: want the 6 characters of [a-z0-9] after "feos-join-" (feos token list shows them)`);
    }
  }
  const { core } = target(flags);
  const missing: string[] = [];
  for (const id of ids) {
    try {
      await deleteJoinToken(core, id);
      process.stdout.write(`token ${id} deleted\n`);
    } catch (err: unknown) {
      if ((err as { code?: number }).code === 404) {
        missing.push(id);
      } else {
        throw apiError(err, `deleting token ${id}`);
      }
    }
  }
  if (missing.length > 0) throw new CliError(`Error from server (NotFound): ${missing.length === 1 ? `token "${missing[0]}"` : `tokens ${missing.map((m) => `"${m}"`).join(', ')}`} not found (feos token list shows the tokens)`);
}
