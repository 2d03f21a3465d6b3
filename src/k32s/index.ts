/**
 * K32S, the snapshot format of Kube32 (seed 002, "Snapshot format"): a streaming writer that yields
 * the linear memory as views of the live memory, and a push-based reader that checks everything the
 * seed lists as the bytes arrive and writes linear memory straight into its destination.
 *
 * The pod runtime writes with {@link encodeSnapshot} and restores with {@link SnapshotDecoder} or
 * {@link decodeSnapshot}; the API server checks `PUT .../checkpoints/<name>/data` with the decoder in
 * `memory: 'discard'` mode and takes the status facts from the header; `kube32-cli snapshot inspect`
 * uses {@link inspectSnapshot}. The byte layout is in `docs/k32s.md`.
 */
export {
  K32S_VERSION,
  K32S_MAGIC,
  HEADER_BYTES,
  SECTION_HEADER_BYTES,
  TRAILER_BYTES,
  WASM_PAGE_BYTES,
  MAX_MEMORY_PAGES,
  MAX_SECTIONS,
  NULL_FUNCREF,
  SectionType,
  ValType,
  type SectionName,
  type SnapshotGlobal,
  type SnapshotTable,
  type SnapshotChannel,
  type HeldEvent,
  type SnapshotState,
  type SnapshotHeader,
  type SectionInfo,
  type ModuleShape,
  type DecodeOptions,
  type DecodedSnapshot,
  type EncodeOptions,
} from './types.ts';
export { K32SError, type K32SErrorCode } from './errors.ts';
export { encodeSnapshot, snapshotByteLength, snapshotSha256 } from './encode.ts';
export { SnapshotDecoder, decodeSnapshot } from './decode.ts';
export { sectionName, valTypeName } from './sections.ts';
export { inspectSnapshot, type SnapshotInspection } from './inspect.ts';
export { toHex, fromHex } from './hex.ts';
