/**
 * Typed access to V8's `WebAssembly` API. The project's `lib` setting (es2024, no DOM) has no
 * `WebAssembly` types, so this file declares the part the runtime uses, without touching globals.
 */

/** A compiled module (structured-cloneable to worker threads). */
export interface WasmModule {
  readonly __wasmModule?: never;
}

export interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(deltaPages: number): number;
}

export interface WasmTable {
  readonly length: number;
  get(index: number): unknown;
  set(index: number, value: unknown): void;
  grow(delta: number, init?: unknown): number;
}

export interface WasmGlobal {
  value: unknown;
}

export interface WasmInstance {
  readonly exports: Record<string, unknown>;
}

export interface WasmModuleDescriptor {
  name: string;
  module?: string;
  kind: 'function' | 'table' | 'memory' | 'global' | 'tag';
}

interface WebAssemblyApi {
  validate(bytes: Uint8Array): boolean;
  compile(bytes: Uint8Array): Promise<WasmModule>;
  instantiate(module: WasmModule, imports: Record<string, Record<string, unknown>>): Promise<WasmInstance>;
  Module: { new (bytes: Uint8Array): WasmModule; exports(m: WasmModule): WasmModuleDescriptor[]; imports(m: WasmModule): WasmModuleDescriptor[] };
  Instance: new (module: WasmModule, imports: Record<string, Record<string, unknown>>) => WasmInstance;
  Memory: new (desc: { initial: number; maximum?: number }) => WasmMemory;
  Table: new (desc: { element: 'anyfunc' | 'externref'; initial: number; maximum?: number }) => WasmTable;
  Global: new (desc: { value: string; mutable?: boolean }, v?: unknown) => WasmGlobal;
  CompileError: new (message?: string) => Error;
  LinkError: new (message?: string) => Error;
  RuntimeError: new (message?: string) => Error;
}

/** V8's `WebAssembly` object. */
export const WA: WebAssemblyApi = (globalThis as unknown as { WebAssembly: WebAssemblyApi }).WebAssembly;
