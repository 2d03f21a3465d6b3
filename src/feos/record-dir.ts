/**
 * Reading a directory of records (seed 000, "Directories"): `<dir>/<id>.pb`, each one protobuf
 * message written whole. A record that cannot be read, or that names another ID than its file, is
 * moved aside to `<id>.pb.bad` with a log line: it is never taken for a live object, and never lost.
 */
import { mkdir, readdir, readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { fromBinary, type DescMessage, type MessageShape } from '@bufbuild/protobuf';
import type { Logger } from '../lib/index.ts';
import { errorMessage } from './api/index.ts';

/**
 * Loads every `<id>.pb` record of `dir` (made when missing).
 * @param kind what a record is, for the log line ("pod", "volume")
 * @param check throws when a decoded record is not acceptable (`id` is the file's name less `.pb`)
 * @returns the records by ID, in directory order
 */
export async function loadRecordDir<Desc extends DescMessage>(
  dir: string,
  schema: Desc,
  kind: string,
  log: Logger,
  check: (record: MessageShape<Desc>, id: string) => void,
): Promise<Map<string, MessageShape<Desc>>> {
  await mkdir(dir, { recursive: true });
  const records = new Map<string, MessageShape<Desc>>();
  for (const name of await readdir(dir)) {
    if (!name.endsWith('.pb')) continue;
    const path = join(dir, name);
    const id = name.slice(0, -3);
    try {
      const record = fromBinary(schema, await readFile(path));
      check(record, id);
      records.set(id, record);
    } catch (err: unknown) {
      log.error({ path, err: errorMessage(err) }, `${kind} record: unreadable; moved to .bad`);
      await rename(path, `${path}.bad`).catch(() => {});
    }
  }
  return records;
}
