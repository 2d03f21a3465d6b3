/**
 * Hibernations and restores in flight, as the next feosd finds them after a kill (seed 000, "A pod":
 * Hibernate and Restore; "takeover" of running microVMs after a restart): `<state-dir>/in-flight/<pod
 * ID>.hibernate` and `.restore`, each a small JSON document written whole (temporary file, fsync,
 * rename) before the step that a kill must not leave half done, and removed once the pod's record says
 * how it ended.
 *
 * - `.hibernate` is written before the first upload: at the next start, a checkpoint whose manifest is
 *   in the store (the commit point) is finished (the pod ends HIBERNATED); one without it is withdrawn
 *   (its uploads removed) and the pod stays on the node.
 * - `.restore` is written before the claim, with a random token that the claim carries too: at the
 *   next start, a claim with the token is this node's, and the restore is finished as far as its files
 *   allow (RUNNING, SUSPENDED, or FAILED with its disk); without the claim, its files are removed.
 *
 * ```json
 * { "version": 1, "checkpoint": "20261129T162100Z-1a2b", "token": "9f0c1d2e3a4b5c6d" }
 * ```
 */
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic } from '../../lib/index.ts';

/** What a marker holds. */
export interface InFlight {
  /** The pod's ID. */
  id: string;
  kind: 'hibernate' | 'restore';
  checkpoint: string;
  /** A restore's token, which its claim carries (empty for a hibernation). */
  token: string;
}

/** The markers' directory in a state dir. */
export function inFlightDir(stateDir: string): string {
  return join(stateDir, 'in-flight');
}

/**
 * Writes a marker whole and durably.
 * @throws Error naming the write's step (lib/atomic-write), such as ENOSPC: the caller does not start
 */
export async function writeInFlight(stateDir: string, m: InFlight): Promise<void> {
  const body = { version: 1, checkpoint: m.checkpoint, token: m.token };
  await mkdir(inFlightDir(stateDir), { recursive: true, mode: 0o700 });
  await writeFileAtomic(join(inFlightDir(stateDir), `${m.id}.${m.kind}`), `${JSON.stringify(body)}\n`, 0o600);
}

/** Removes a marker; none is fine. */
export async function removeInFlight(stateDir: string, id: string, kind: InFlight['kind']): Promise<void> {
  await rm(join(inFlightDir(stateDir), `${id}.${kind}`), { force: true });
}

/**
 * Every marker. One that cannot be read is returned in `bad` (its file name and why) and left alone.
 */
export async function readInFlight(stateDir: string): Promise<{ markers: InFlight[]; bad: Array<{ file: string; why: string }> }> {
  const dir = inFlightDir(stateDir);
  const markers: InFlight[] = [];
  const bad: Array<{ file: string; why: string }> = [];
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err: unknown) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { markers, bad };
    throw err;
  }
  for (const file of names.sort()) {
    const m = /^([a-z0-9]+)\.(hibernate|restore)$/.exec(file);
    if (!m) continue;
    try {
      const doc = JSON.parse(await readFile(join(dir, file), 'utf8')) as { version?: unknown; checkpoint?: unknown; token?: unknown };
      if (doc.version !== 1 || typeof doc.checkpoint !== 'string' || typeof doc.token !== 'string') throw new Error('not {version: 1, checkpoint, token}');
      markers.push({ id: m[1], kind: m[2] as InFlight['kind'], checkpoint: doc.checkpoint, token: doc.token });
    } catch (err: unknown) {
      bad.push({ file: join(dir, file), why: err instanceof Error ? err.message : String(err) });
    }
  }
  return { markers, bad };
}
