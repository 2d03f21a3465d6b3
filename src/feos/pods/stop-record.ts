/**
 * `<state-dir>/suspended-for-stop.json` (seed 000, "Suspend on stop", "Directories"): the pods that a
 * stop of feosd suspended, for the next feosd to resume. Written whole (temporary file, fsync, rename,
 * fsync of the directory) each time a pod is added, so that a stop that is killed keeps what it did.
 *
 * ```json
 * { "version": 1, "stoppedAt": "2026-11-29T16:21:00.000Z", "pods": ["abcdefghjkm"] }
 * ```
 */
import { readFile, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFileAtomic } from '../../lib/index.ts';
import { errorMessage } from '../api/index.ts';
import { parsePodId } from './id.ts';

/** The record's file name in the state dir. */
export const STOP_RECORD_FILE = 'suspended-for-stop.json';
/** The format this code writes and reads. */
export const STOP_RECORD_VERSION = 1;

/** What the record holds. */
export interface StopRecord {
  version: typeof STOP_RECORD_VERSION;
  /** When the stop began (ISO 8601, UTC). */
  stoppedAt: string;
  /** The suspended pods' IDs, in the order they were suspended. */
  pods: string[];
}

/** A record that is not a record of this format: named, never a crash. */
export class StopRecordError extends Error {
  constructor(path: string, why: string, options?: { cause?: unknown }) {
    super(`${path}: ${why}`, options);
    this.name = 'StopRecordError';
  }
}

/** The record's path in a state dir. */
export function stopRecordPath(stateDir: string): string {
  return join(stateDir, STOP_RECORD_FILE);
}

/**
 * Reads the record.
 * @returns undefined when there is none
 * @throws StopRecordError naming the file and what is wrong (not JSON, another version, a bad pod ID)
 */
export async function readStopRecord(path: string): Promise<StopRecord | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err: unknown) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new StopRecordError(path, `cannot be read: ${errorMessage(err)}`, { cause: err });
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err: unknown) {
    throw new StopRecordError(path, `not JSON: ${errorMessage(err)}`, { cause: err });
  }
  const r = doc as Partial<StopRecord> | null;
  if (!r || typeof r !== 'object') throw new StopRecordError(path, 'not an object');
  if (r.version !== STOP_RECORD_VERSION) throw new StopRecordError(path, `version ${JSON.stringify(r.version)}: want ${STOP_RECORD_VERSION}`);
  if (typeof r.stoppedAt !== 'string' || Number.isNaN(Date.parse(r.stoppedAt))) throw new StopRecordError(path, `stoppedAt ${JSON.stringify(r.stoppedAt)}: want a time`);
  if (!Array.isArray(r.pods)) throw new StopRecordError(path, 'pods: want a list of pod IDs');
  const pods: string[] = [];
  for (const id of r.pods) {
    try {
      pods.push(parsePodId(String(id)));
    } catch {
      throw new StopRecordError(path, `pods: ${JSON.stringify(id)} is not a pod ID`);
    }
  }
  return { version: STOP_RECORD_VERSION, stoppedAt: r.stoppedAt, pods };
}

/** Writes the record whole and durably. @throws Error naming the write's step (lib/atomic-write) */
export async function writeStopRecord(path: string, record: Omit<StopRecord, 'version'>): Promise<void> {
  const body: StopRecord = { version: STOP_RECORD_VERSION, stoppedAt: record.stoppedAt, pods: record.pods };
  await writeFileAtomic(path, `${JSON.stringify(body, null, 2)}\n`, 0o600);
}

/** Removes the record; none is fine. */
export async function removeStopRecord(path: string): Promise<void> {
  await rm(path, { force: true });
}

/**
 * Moves a bad record aside to `<file>.bad`, where it is kept for a look and never taken again (one
 * there already is replaced; a directory there is removed first).
 * @returns whether it moved, where to, and why not
 */
export async function setStopRecordAside(path: string): Promise<{ moved: boolean; to: string; why?: string }> {
  const to = `${path}.bad`;
  try {
    await rm(to, { recursive: true, force: true });
    await rename(path, to);
    return { moved: true, to };
  } catch (err: unknown) {
    return { moved: false, to, why: errorMessage(err) };
  }
}
