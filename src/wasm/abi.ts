/**
 * The pod ABI's names and signatures (pod-abi.md), and the names of the exports the runtime adds
 * when it instruments a module.
 */

/** Imports of module `"k32"` the node provides, with their signatures (pod-abi.md, "Imports the node provides"). */
export const K32_IMPORTS: Readonly<Record<string, string>> = {
  k32_time_ms: '() -> i64',
  k32_log: '(i32, i32) -> ()',
  k32_env: '(i32, i32, i32, i32) -> i32',
  k32_asset: '(i32, i32, i32, i32) -> i32',
  kube32_channel_open: '(i32, i32) -> i32',
  k32_channel_send: '(i32, i32, i32) -> i32',
  k32_fs_open: '(i32, i32, i32) -> i32',
  k32_fs_read: '(i32, i32, i32) -> i32',
  k32_fs_write: '(i32, i32, i32) -> i32',
  k32_fs_close: '(i32) -> i32',
};

/** The imports that take a pointer, so need the module's exported `memory`. */
export const POINTER_IMPORTS = new Set(Object.keys(K32_IMPORTS).filter((n) => n !== 'k32_time_ms' && n !== 'k32_fs_close'));

/** Exports the node calls, with their signatures (pod-abi.md, "Exports the node calls"). */
export const K32_EXPORTS: Readonly<Record<string, string>> = {
  k32_alloc: '(i32) -> i32',
  k32_init: '() -> ()',
  k32_restored: '() -> ()',
  k32_handle: '(i32, i32) -> i64',
  k32_tick: '() -> ()',
  k32_event: '(i32, i32, i32, i32) -> ()',
};

/** The exports that make a module a request pod. */
export const REQUEST_EXPORTS = ['k32_handle', 'k32_tick', 'k32_event'] as const;

/** The exports that make a module an app pod (its entry point). */
export const ENTRY_POINTS = ['_start', 'app_main', 'main'] as const;

/** Export names the runtime adds (`\u0000` cannot be typed in a source language, so they never clash). */
export const INSTR = {
  prefix: '\u0000k32:',
  memory: '\u0000k32:memory',
  global: (i: number): string => `\u0000k32:global:${i}`,
  table: (i: number): string => `\u0000k32:table:${i}`,
  func: (i: number): string => `\u0000k32:func:${i}`,
  /** An f32/f64 global's bits as i32/i64 (V8's API would turn NaN payloads into the canonical NaN). */
  getBits: (i: number): string => `\u0000k32:global-bits:${i}`,
  setBits: (i: number): string => `\u0000k32:set-global-bits:${i}`,
} as const;

/** The seed's blocker for an app pod's entry point ("What keeps a pod from moving"). */
export function entryPointBlocker(name: string): string {
  return `entry point ${name} runs on its own thread`;
}

/** The seed's blocker for an open `k32_fs` descriptor. */
export function openFileBlocker(path: string, fd: number): string {
  return `open file ${path} (descriptor ${fd})`;
}

/** The seed's blocker for a call that outlasted the freeze timeout. */
export function runningCallBlocker(name: string, ms: number): string {
  return `call ${name} still running after ${ms} ms`;
}

/** The blocker for a table that is not of functions (pod-abi.md, "What a snapshot holds"). */
export function externrefTableBlocker(index: number): string {
  return `table ${index} holds externref, not functions`;
}

/** The blocker for a mutable global whose value cannot be written to a snapshot (externref, v128). */
export function globalTypeBlocker(index: number, typeName: string): string {
  return `global ${index} holds ${typeName}, which a snapshot cannot carry`;
}

/** Page size of linear memory, bytes. */
export const PAGE = 65536;

/** The freeze timeout the seed gives (`timeoutMs` default), ms. */
export const DEFAULT_FREEZE_TIMEOUT_MS = 10_000;

/** Events held while frozen (seed, "Kubelet endpoints"). */
export const MAX_HELD_EVENTS = 8;

/** Largest channel name (pod-abi.md, kube32_channel_open), bytes. */
export const MAX_CHANNEL_NAME = 128;

/** Largest channel payload (pod-abi.md, k32_channel_send), bytes. */
export const MAX_CHANNEL_PAYLOAD = 4096;

/**
 * Most entries a pod's table may have, at the start or grown (a table's entries live in the node's
 * JS heap, outside the memory limit: a table of millions would exhaust the pod's worker). Large
 * compiled programs have tables of thousands to tens of thousands of entries.
 */
export const MAX_TABLE_ENTRIES = 1 << 20;

/**
 * Most mutable globals a pod's module may have. Each is exported for the snapshot, and a module of
 * hundreds of thousands takes seconds of the node's time to load and to instantiate; compilers make
 * a handful (clang: `__stack_pointer`; AssemblyScript: a few dozen).
 */
export const MAX_MUTABLE_GLOBALS = 65_536;
