/** Reads a snapshot for display: its header, where each section lies, and whether its trailer holds. */
import { SnapshotDecoder } from './decode.ts';
import { valTypeName } from './sections.ts';
import { SectionType, type DecodedSnapshot, type SectionInfo, type SnapshotHeader } from './types.ts';

/** A section as `snapshot inspect` shows it. */
export interface InspectedSection extends SectionInfo {
  /** What it holds, in words: `65536 bytes`, `3 globals`, `table 0, 12 entries`, `1 channel`, `skipped`. */
  summary: string;
}

/** Everything `kube32-cli snapshot inspect` shows of a snapshot. */
export interface SnapshotInspection {
  /** The header. */
  header: SnapshotHeader;
  /** Every section in stored order. */
  sections: InspectedSection[];
  /** The trailer as stored, the digest computed over the bytes before it, and whether they are equal. */
  trailer: { stored: Uint8Array; computed: Uint8Array; ok: boolean };
  /** The snapshot's length in bytes. */
  byteLength: number;
  /** The decoded small sections (memory is not kept). */
  decoded: Omit<DecodedSnapshot, 'memory'>;
}

/** A name from a snapshot made safe for a terminal: control characters as `\\u` escapes. */
const printable = (s: string): string => s.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
const MAX_LISTED = 4;

const plural = (n: number, one: string, many = `${one}s`): string => `${n} ${n === 1 ? one : many}`;

/**
 * Reads a snapshot without keeping its memory and describes it. A trailer that does not match is
 * reported (`trailer.ok` false), not thrown, so that a tool can show what it found; every other
 * defect throws as in a restore.
 * @param source the whole snapshot, or its chunks (a file stream, standard input).
 * @throws {K32SError} for a snapshot that cannot be read to its trailer.
 */
export async function inspectSnapshot(
  source: Uint8Array | AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
): Promise<SnapshotInspection> {
  const decoder = new SnapshotDecoder({ memory: 'discard', verifyTrailer: false });
  if (source instanceof Uint8Array) decoder.push(source);
  else for await (const chunk of source) decoder.push(chunk);
  const d = decoder.end();
  let table = 0;
  const sections = d.sections.map((s): InspectedSection => {
    let summary: string;
    switch (s.type) {
      case SectionType.MEMORY:
        summary = `${s.length} bytes of linear memory`;
        break;
      case SectionType.GLOBALS: {
        const types = new Map<string, number>();
        for (const g of d.globals) types.set(valTypeName(g.type), (types.get(valTypeName(g.type)) ?? 0) + 1);
        const detail = [...types].map(([t, n]) => `${n} ${t}`).join(', ');
        summary = plural(d.globals.length, 'global') + (detail ? ` (${detail})` : '');
        break;
      }
      case SectionType.TABLE: {
        const t = d.tables[table++]!;
        summary = `table ${t.index}, ${plural(t.entries.length, 'entry', 'entries')}`;
        break;
      }
      case SectionType.CHANNELS: {
        const listed = d.channels.slice(0, MAX_LISTED).map((c) => `${c.handle}=${printable(c.name)}`);
        if (d.channels.length > MAX_LISTED) listed.push('...');
        summary = plural(d.channels.length, 'channel') + (listed.length ? `: ${listed.join(', ')}` : '');
        break;
      }
      case SectionType.EVENTS: {
        const listed = d.events.slice(0, MAX_LISTED).map((e) => `${printable(e.topic)} (${plural(e.payload.length, 'byte')})`);
        if (d.events.length > MAX_LISTED) listed.push('...');
        summary = plural(d.events.length, 'held event') + (listed.length ? `: ${listed.join(', ')}` : '');
        break;
      }
      default:
        summary = 'unknown type, skipped';
    }
    return { ...s, summary };
  });
  const { memory: _memory, ...decoded } = d;
  return {
    header: d.header,
    sections,
    trailer: { stored: d.snapshotSha256, computed: d.computedSha256, ok: d.trailerOk },
    byteLength: d.byteLength,
    decoded,
  };
}
