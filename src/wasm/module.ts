/**
 * Loading a pod module: check it against the ABI (pod-abi.md), classify it (request or app pod),
 * and instrument it on the binary so that V8's API reaches every mutable global, every table and
 * every function by the module's own indices (seed, "What moves": the state is linear memory,
 * mutable globals and tables). The image SHA-256 is that of the original bytes.
 */
import { createHash } from 'node:crypto';
import { ENTRY_POINTS, INSTR, K32_EXPORTS, K32_IMPORTS, MAX_MUTABLE_GLOBALS, MAX_TABLE_ENTRIES, PAGE, POINTER_IMPORTS, REQUEST_EXPORTS } from './abi.ts';
import { BinaryError, parseModule, rewriteModule, signatureText, writeU32, type AddedFunction, type FuncType, type ParsedExport, type ParsedModule } from './binary.ts';
import { ModuleError, errorMessage } from './errors.ts';
import type { ExportInfo, ImportInfo, LoadOptions, ModuleShape, PodModule } from './types.ts';
import { WA } from './wasm-api.ts';
import { warmWorkerPool } from './pod-thread.ts';

/** WebAssembly's own limit on a 32-bit memory, in pages (4 GiB). */
const MAX_PAGES = 65536;

/**
 * Checks, classifies and instruments a module, and compiles the result.
 *
 * @param bytes the module's original bytes (kept; the image digest is theirs)
 * @param opts the pod's memory limit
 * @returns the loaded module, ready for {@link PodInstance.start}
 * @throws ModuleError whose code and message name the cause: `NotWasm` (not a WebAssembly module),
 *   `Malformed` (does not parse or validate), `Unsupported` (shared or 64-bit memory, several
 *   memories, an imported memory), `UnknownImport` (`unknown import k32.foo`), `ImportType`,
 *   `ExportType`, `NoMemory` (no `memory` export where one is needed), `MissingExport`,
 *   `MemoryAboveLimit` (the initial memory is above the limit)
 * @throws RangeError when `memoryLimitBytes` is not a positive number
 * @example
 * const mod = await loadModule(await readFile('build/examples/echo.wasm'), { memoryLimitBytes: 16 * 2 ** 20 });
 * mod.kind // 'request'
 */
export async function loadModule(bytes: Uint8Array, opts: LoadOptions = {}): Promise<PodModule> {
  const memoryLimitBytes = opts.memoryLimitBytes ?? MAX_PAGES * PAGE;
  if (!Number.isFinite(memoryLimitBytes) || memoryLimitBytes <= 0) {
    throw new RangeError(`memoryLimitBytes must be a positive number of bytes: current value is ${memoryLimitBytes}`);
  }
  const original = Uint8Array.from(bytes);
  let parsed: ParsedModule;
  try {
    parsed = parseModule(original);
  } catch (err: unknown) {
    if (err instanceof BinaryError && err.offset < 8) throw new ModuleError('NotWasm', err.message.replace(/ \(at byte \d+\)$/, ''));
    throw new ModuleError('Malformed', `the module does not parse: ${errorMessage(err)}`, { cause: err });
  }
  if (!WA.validate(original)) {
    let detail = 'invalid';
    try {
      new WA.Module(original);
    } catch (err: unknown) {
      detail = errorMessage(err);
    }
    throw new ModuleError('Malformed', `the module does not validate: ${detail}`);
  }

  const sig = (typeIndex: number): string => {
    const t = parsed.types[typeIndex];
    if (!t) throw new ModuleError('Malformed', `type index ${typeIndex} out of range`);
    return signatureText(t);
  };

  // Imports: only functions of module "k32", each with its ABI signature.
  const imports: ImportInfo[] = [];
  const unknown: string[] = [];
  for (const imp of parsed.imports) {
    const info: ImportInfo = { module: imp.module, name: imp.name, kind: imp.kind };
    if (imp.kind === 'function') info.signature = sig(imp.typeIndex!);
    imports.push(info);
    const want = imp.module === 'k32' && imp.kind === 'function' ? K32_IMPORTS[imp.name] : undefined;
    if (want === undefined) {
      unknown.push(imp.kind === 'function' ? `${imp.module}.${imp.name}` : `${imp.module}.${imp.name} (a ${imp.kind})`);
    } else if (info.signature !== want) {
      throw new ModuleError('ImportType', `import k32.${imp.name} has type ${info.signature}, the node provides ${want}`);
    }
  }
  if (unknown.length > 0) {
    throw new ModuleError('UnknownImport', `${unknown.map((u) => `unknown import ${u}`).join(', ')}: the node provides only the k32 functions of the pod ABI`);
  }

  // Exports.
  const exports: ExportInfo[] = parsed.exports.map((e) => {
    const info: ExportInfo = { name: e.name, kind: e.kind, index: e.index };
    if (e.kind === 'function') info.signature = sig(parsed.functionTypes[e.index]!);
    return info;
  });
  const fn = new Map(exports.filter((e) => e.kind === 'function').map((e) => [e.name, e]));
  for (const [name, want] of Object.entries(K32_EXPORTS)) {
    const e = fn.get(name);
    if (e && e.signature !== want) throw new ModuleError('ExportType', `export ${name} has type ${e.signature}, the ABI needs ${want}`);
  }
  for (const e of exports) {
    if (e.name.startsWith(INSTR.prefix)) throw new ModuleError('Unsupported', `export name ${JSON.stringify(e.name)} is reserved for the runtime`);
  }
  const entryPoint = ENTRY_POINTS.find((n) => fn.has(n));
  const isRequest = REQUEST_EXPORTS.some((n) => fn.has(n));
  if (!entryPoint && !isRequest) {
    throw new ModuleError('MissingExport', 'the module exports none of k32_handle, k32_tick, k32_event (a request pod) nor _start, app_main, main (an app pod)');
  }
  if ((fn.has('k32_handle') || fn.has('k32_event')) && !fn.has('k32_alloc')) {
    throw new ModuleError('MissingExport', `the module exports ${fn.has('k32_handle') ? 'k32_handle' : 'k32_event'} but not k32_alloc, which the node calls for room for its input`);
  }

  // Memory.
  if (parsed.memories.length > 1) throw new ModuleError('Unsupported', `the module has ${parsed.memories.length} memories; a pod has one linear memory`);
  const mem = parsed.memories[0];
  if (mem?.imported) throw new ModuleError('Unsupported', 'the module imports its memory; a pod defines its own');
  if (mem && mem.limits.flags & 0x02) throw new ModuleError('Unsupported', 'the module has a shared memory, which a pod cannot have');
  const memoryExport = exports.find((e) => e.name === 'memory' && e.kind === 'memory');
  const needsMemory = fn.has('k32_handle') || fn.has('k32_event') || parsed.imports.some((i) => i.module === 'k32' && POINTER_IMPORTS.has(i.name));
  if (needsMemory && !memoryExport) {
    const why = fn.has('k32_handle') ? 'it exports k32_handle' : fn.has('k32_event') ? 'it exports k32_event' : 'it imports k32 functions that take pointers';
    throw new ModuleError('NoMemory', `the module has no "memory" export, which the node needs because ${why}`);
  }
  const subPageLimit = memoryLimitBytes < PAGE;
  const memoryPagesLimit = Math.min(MAX_PAGES, Math.max(1, Math.floor(memoryLimitBytes / PAGE)));
  if (mem && mem.limits.min > memoryPagesLimit) {
    throw new ModuleError(
      'MemoryAboveLimit',
      `the module's initial memory is ${mem.limits.min} pages (${mem.limits.min * PAGE} bytes), above the pod's memory limit of ${memoryLimitBytes} bytes (${memoryPagesLimit} page${memoryPagesLimit === 1 ? '' : 's'})`,
    );
  }

  const mutableGlobals = parsed.globals.filter((g) => g.mutable).length;
  if (mutableGlobals > MAX_MUTABLE_GLOBALS) {
    throw new ModuleError('Unsupported', `the module has ${mutableGlobals} mutable globals, more than a pod may have (${MAX_MUTABLE_GLOBALS})`);
  }
  parsed.tables.forEach((t, index) => {
    if (t.limits.min > MAX_TABLE_ENTRIES) {
      throw new ModuleError('Unsupported', `table ${index} has ${t.limits.min} initial entries, more than a pod's table may have (${MAX_TABLE_ENTRIES})`);
    }
  });

  // Shape and instrumentation.
  const shape: ModuleShape = {
    globals: [],
    tables: parsed.tables.map((t, index) => ({ index, elementType: t.elementType, min: t.limits.min, ...(t.limits.max !== undefined ? { max: t.limits.max } : {}) })),
    functionCount: parsed.functionTypes.length,
    memory: mem ? { minPages: mem.limits.min, ...(mem.limits.max !== undefined ? { maxPages: mem.limits.max } : {}) } : null,
  };
  const addExports: ParsedExport[] = [];
  parsed.globals.forEach((g, index) => {
    if (!g.mutable) return;
    shape.globals.push({ index, type: g.type, imported: g.imported });
    addExports.push({ name: INSTR.global(index), kind: 'global', index });
  });
  for (let index = 0; index < parsed.tables.length; index++) addExports.push({ name: INSTR.table(index), kind: 'table', index });
  for (let index = 0; index < parsed.functionTypes.length; index++) addExports.push({ name: INSTR.func(index), kind: 'function', index });
  if (mem) addExports.push({ name: INSTR.memory, kind: 'memory', index: 0 });
  const { addTypes, addFunctions } = floatAccessors(parsed, addExports);
  const instrumentedBytes = rewriteModule(original, parsed, {
    ...(mem ? { memoryMaxPages: memoryPagesLimit } : {}),
    tableMaxEntries: MAX_TABLE_ENTRIES,
    addTypes,
    addFunctions,
    addExports,
  });
  let compiled: PodModule['compiled'];
  try {
    compiled = await WA.compile(instrumentedBytes);
  } catch (err: unknown) {
    throw new ModuleError('Malformed', `the instrumented module does not compile: ${errorMessage(err)}`, { cause: err });
  }
  const digest = createHash('sha256').update(original).digest();
  // A pod of this module is likely to start soon: have a worker booted for it.
  void warmWorkerPool();
  return Object.freeze({
    imageSha256: digest.toString('hex'),
    imageSha256Bytes: new Uint8Array(digest),
    kind: entryPoint ? 'app' : 'request',
    ...(entryPoint ? { entryPoint } : {}),
    imports,
    exports,
    shape,
    bytes: original,
    instrumentedBytes,
    compiled,
    memoryLimitBytes,
    memoryPagesLimit,
    subPageLimit,
    hasStartFunction: parsed.start !== undefined,
  } satisfies PodModule);
}

/**
 * Accessor functions for every mutable f32 and f64 global, moving its bits as an i32 or i64
 * (`i32.reinterpret_f32` and back): V8's `WebAssembly.Global.value` is a JS number, which turns a
 * NaN's payload into the canonical NaN; the accessors keep every bit. Their exports are appended to
 * `addExports`; their function indices follow the module's own, which do not change.
 */
function floatAccessors(parsed: ParsedModule, addExports: ParsedExport[]): { addTypes: FuncType[]; addFunctions: AddedFunction[] } {
  const addTypes: FuncType[] = [];
  const addFunctions: AddedFunction[] = [];
  const typeIndex = new Map<string, number>();
  const type = (params: number[], results: number[]): number => {
    const key = `${params.join(',')}>${results.join(',')}`;
    let i = typeIndex.get(key);
    if (i === undefined) {
      i = parsed.types.length + addTypes.length;
      addTypes.push({ params, results });
      typeIndex.set(key, i);
    }
    return i;
  };
  const code = (...ops: number[]): Uint8Array => Uint8Array.from([0x00, ...ops, 0x0b]); // no locals
  parsed.globals.forEach((g, index) => {
    if (!g.mutable || (g.type !== 0x7d && g.type !== 0x7c)) return;
    const bits = g.type === 0x7d ? 0x7f : 0x7e; // i32 for f32, i64 for f64
    const idx: number[] = [];
    writeU32(idx, index);
    const getter = parsed.functionTypes.length + addFunctions.length;
    // global.get; i32.reinterpret_f32 (0xbc) or i64.reinterpret_f64 (0xbd)
    addFunctions.push({ typeIndex: type([], [bits]), body: code(0x23, ...idx, g.type === 0x7d ? 0xbc : 0xbd) });
    // local.get 0; f32.reinterpret_i32 (0xbe) or f64.reinterpret_i64 (0xbf); global.set
    addFunctions.push({ typeIndex: type([bits], []), body: code(0x20, 0x00, g.type === 0x7d ? 0xbe : 0xbf, 0x24, ...idx) });
    addExports.push({ name: INSTR.getBits(index), kind: 'function', index: getter });
    addExports.push({ name: INSTR.setBits(index), kind: 'function', index: getter + 1 });
  });
  return { addTypes, addFunctions };
}
