/**
 * `kube32-cli snapshot inspect FILE|-` (seed 002, "Snapshot format"): reads a K32S snapshot as a restore
 * would, without keeping its memory, and prints its header and sections, or with `-o json|yaml` the
 * same facts and the small sections in full. Loaded only when the command runs (its flags and help are
 * in ../commands/snapshot.ts), so that `--help` and the other commands do not load the K32S reader.
 */
import { createReadStream } from 'node:fs';
import { inspectSnapshot, K32SError, toHex, valTypeName, type SnapshotInspection } from '../../k32s/index.ts';
import { CliError } from '../errors.ts';
import { formatObject, formatTable } from '../output.ts';

/** `snapshot inspect`'s flags as commander parses them. */
export interface InspectFlags {
  /** `-o`: json, yaml, or absent for the human form. */
  output?: string;
}

/**
 * Checks the snapshot `file` (standard input for `-`) and prints it on standard output.
 * @throws CliError for an unknown output format (before reading anything), a file that cannot be read,
 *   a snapshot that the reader refuses (its message), or one whose trailer does not match its contents
 *   (after it was printed)
 */
export async function inspect(file: string, flags: InspectFlags): Promise<void> {
  const format = flags.output ?? '';
  if (format !== '' && format !== 'json' && format !== 'yaml') {
    throw new CliError(`unable to match a printer suitable for the output format "${format}", allowed formats are: json,yaml`);
  }
  const inspection = await read(file);
  process.stdout.write(format === '' ? describe(inspection) : print(inspection, format));
  if (!inspection.trailer.ok) {
    throw new CliError(`${label(file)}: the snapshot's trailer does not match its contents (damaged in transfer or storage)`);
  }
}

function label(file: string): string {
  return file === '-' ? 'standard input' : file;
}

async function read(file: string): Promise<SnapshotInspection> {
  const source = file === '-' ? process.stdin : createReadStream(file);
  try {
    return await inspectSnapshot(source);
  } catch (err: unknown) {
    if (err instanceof K32SError) throw new CliError(`${label(file)}: ${err.message}`, 1, { cause: err });
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new CliError(`${file}: no such file`, 1, { cause: err });
    if (code === 'EISDIR') throw new CliError(`${file}: is a directory`, 1, { cause: err });
    throw new CliError(`${file}: cannot read it: ${err instanceof Error ? err.message : String(err)}`, 1, { cause: err });
  }
}

/** A u64 for JSON: a number while it is exact, else a decimal string. */
function u64(v: bigint): number | string {
  return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v.toString();
}

function unixTime(ms: bigint): string | null {
  if (ms === 0n || ms > 8_640_000_000_000_000n) return null;
  return new Date(Number(ms)).toISOString();
}

/** The object that `-o json` and `-o yaml` print. */
function toObject(i: SnapshotInspection): Record<string, unknown> {
  const h = i.header;
  const d = i.decoded;
  return {
    version: h.version,
    flags: h.flags,
    imageSha256: toHex(h.imageSha256),
    memoryBytes: h.memoryBytes,
    memoryPages: h.memoryPages,
    podTimeMs: u64(h.podTimeMs),
    unixTimeMs: u64(h.unixTimeMs),
    unixTime: unixTime(h.unixTimeMs),
    sectionCount: h.sectionCount,
    sizeBytes: i.byteLength,
    snapshotSha256: toHex(i.trailer.stored),
    computedSha256: toHex(i.trailer.computed),
    trailerOk: i.trailer.ok,
    sections: i.sections.map((s) => ({ type: s.type, name: s.name, offset: s.offset, length: s.length, summary: s.summary })),
    globals: d.globals.map((g) => ({ index: g.index, type: valTypeName(g.type), bits: `0x${g.bits.toString(16).padStart(g.type === 0x7e || g.type === 0x7c ? 16 : 8, '0')}` })),
    tables: d.tables.map((t) => ({ index: t.index, size: t.entries.length, entries: Array.from(t.entries, (e) => (e === 0xffffffff ? null : e)) })),
    channels: d.channels.map((c) => ({ handle: c.handle, name: c.name })),
    events: d.events.map((e) => ({ topic: e.topic, payloadBytes: e.payload.length, payloadBase64: Buffer.from(e.payload).toString('base64') })),
    unknownSections: d.unknownSections,
  };
}

function print(i: SnapshotInspection, format: 'json' | 'yaml'): string {
  return formatObject(toObject(i), format);
}

/** The human form: the header as `kubectl describe` lays out fields, then the sections as a `kubectl get` table. */
function describe(i: SnapshotInspection): string {
  const h = i.header;
  const when = unixTime(h.unixTimeMs);
  const pages = `${h.memoryPages} page${h.memoryPages === 1 ? '' : 's'}`;
  const fields: [string, string][] = [
    ['Version', String(h.version)],
    ['Image SHA-256', toHex(h.imageSha256)],
    ['Memory', `${h.memoryBytes} bytes (${pages})`],
    ['Pod time', `${h.podTimeMs} ms`],
    ['Taken at', when ? `${when} (${h.unixTimeMs} ms)` : h.unixTimeMs === 0n ? '<unset>' : `${h.unixTimeMs} ms`],
    ['Size', `${i.byteLength} bytes`],
    ['Snapshot SHA-256', toHex(i.trailer.stored)],
    ['Trailer', i.trailer.ok ? 'ok' : `does not match the contents (computed ${toHex(i.trailer.computed)})`],
  ];
  const width = Math.max(...fields.map(([k]) => k.length)) + 2;
  const head = fields.map(([k, v]) => `${`${k}:`.padEnd(width)}${v}\n`).join('');
  const table = formatTable(
    ['Section', 'Type', 'Offset', 'Length', 'Content'],
    i.sections.map((s) => [s.name, s.type, s.offset, s.length, s.summary]),
  );
  return i.sections.length > 0 ? `${head}\n${table}` : head;
}
