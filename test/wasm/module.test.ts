/** loadModule: refusals that name their cause, classification, instrumentation (pod-abi.md). */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { ModuleError, loadModule } from '../../src/wasm/index.ts';
import { WA } from '../../src/wasm/wasm-api.ts';
import { wat } from './helpers.ts';

async function refused(bytes: Uint8Array, code: string, message: RegExp, memoryLimitBytes?: number): Promise<void> {
  await assert.rejects(loadModule(bytes, memoryLimitBytes ? { memoryLimitBytes } : {}), (err: unknown) => {
    assert.ok(err instanceof ModuleError, `expected a ModuleError, got ${String(err)}`);
    assert.equal(err.code, code);
    assert.match(err.message, message);
    return true;
  });
}

const TICK = '(func (export "k32_tick"))';

test('refuses bytes that are not WebAssembly, naming the cause', { timeout: 10_000 }, async () => {
  await refused(new TextEncoder().encode('#!/bin/sh\necho hi\n'), 'NotWasm', /not a WebAssembly module/);
  await refused(new Uint8Array([0, 0x61, 0x73, 0x6d, 2, 0, 0, 0]), 'NotWasm', /binary version 2/);
  await refused(new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 1, 0x50]), 'Malformed', /does not parse/);
});

test('refuses a module that does not validate', { timeout: 10_000 }, async () => {
  // A function whose body leaves an i32 where none is expected (type section, function, export, code).
  const bytes = Uint8Array.from([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 1, 4, 1, 0x60, 0, 0, 3, 2, 1, 0, 7, 0x0c, 1, 8, ...new TextEncoder().encode('k32_tick'), 0, 0, 10, 6, 1, 4, 0, 0x41, 1, 0x0b]);
  await refused(bytes, 'Malformed', /does not validate/);
});

test('refuses an unknown import with "unknown import k32.foo"', { timeout: 10_000 }, async () => {
  await refused(wat(`(module (import "k32" "foo" (func)) ${TICK})`), 'UnknownImport', /unknown import k32\.foo/);
  await refused(wat(`(module (import "env" "abort" (func (param i32 i32 i32 i32))) ${TICK})`), 'UnknownImport', /unknown import env\.abort/);
  await refused(wat(`(module (import "k32" "g" (global i32)) ${TICK})`), 'UnknownImport', /unknown import k32\.g \(a global\)/);
});

test('refuses a k32 import or an ABI export with the wrong signature', { timeout: 10_000 }, async () => {
  await refused(wat(`(module (import "k32" "k32_time_ms" (func (result i32))) ${TICK})`), 'ImportType', /k32\.k32_time_ms has type \(\) -> i32, the node provides \(\) -> i64/);
  await refused(wat('(module (memory (export "memory") 1) (func (export "k32_alloc") (param i32) (result i32) i32.const 0) (func (export "k32_handle") (param i32 i32) (result i32) i32.const 0))'), 'ExportType', /export k32_handle has type \(i32, i32\) -> i32, the ABI needs \(i32, i32\) -> i64/);
});

test('refuses a module without a memory export where one is needed', { timeout: 10_000 }, async () => {
  await refused(wat('(module (memory 1) (func (export "k32_alloc") (param i32) (result i32) i32.const 0) (func (export "k32_handle") (param i32 i32) (result i64) i64.const 0))'), 'NoMemory', /no "memory" export.*k32_handle/);
  await refused(wat(`(module (import "k32" "k32_log" (func (param i32 i32))) ${TICK})`), 'NoMemory', /imports k32 functions that take pointers/);
  // A tick-only pod that uses only the clock needs no memory.
  const m = await loadModule(wat(`(module (import "k32" "k32_time_ms" (func (result i64))) ${TICK})`));
  assert.equal(m.shape.memory, null);
});

test('refuses a module that is neither a request nor an app pod, or lacks k32_alloc', { timeout: 10_000 }, async () => {
  await refused(wat('(module (func (export "hello")))'), 'MissingExport', /none of k32_handle, k32_tick, k32_event/);
  await refused(wat('(module (memory (export "memory") 1) (func (export "k32_handle") (param i32 i32) (result i64) i64.const 0))'), 'MissingExport', /k32_handle but not k32_alloc/);
});

test('refuses a memory minimum above the limit, a shared memory', { timeout: 10_000 }, async () => {
  await refused(wat(`(module (memory (export "memory") 4) ${TICK})`), 'MemoryAboveLimit', /initial memory is 4 pages \(262144 bytes\), above the pod's memory limit of 131072 bytes \(2 pages\)/, 128 * 1024);
  await refused(wat(`(module (memory (export "memory") 1 2 shared) ${TICK})`, ['--enable-threads']), 'Unsupported', /shared memory/);
});

test('classifies request and app pods; an app pod names its entry point', { timeout: 10_000 }, async () => {
  const req = await loadModule(wat(`(module ${TICK})`));
  assert.equal(req.kind, 'request');
  assert.equal(req.entryPoint, undefined);
  const app = await loadModule(wat('(module (func (export "_start")))'));
  assert.equal(app.kind, 'app');
  assert.equal(app.entryPoint, '_start');
  const c = await loadModule(wat(`(module (func (export "app_main")) ${TICK})`));
  assert.equal(c.kind, 'app');
  assert.equal(c.entryPoint, 'app_main');
});

test('keeps the digest of the original bytes and the module\'s own indices, and caps memory at the limit', { timeout: 10_000 }, async () => {
  const bytes = wat('state.wat');
  const m = await loadModule(bytes, { memoryLimitBytes: 3 * 65536 });
  assert.equal(m.imageSha256, createHash('sha256').update(bytes).digest('hex'));
  assert.deepEqual([...m.imageSha256Bytes], [...createHash('sha256').update(bytes).digest()]);
  assert.notDeepEqual(m.instrumentedBytes, bytes);
  // Mutable globals by their index in the original module (1 and 4 are immutable).
  assert.deepEqual(m.shape.globals.map((g) => [g.index, g.type]), [[0, 0x7f], [2, 0x7f], [3, 0x7e], [5, 0x7d], [6, 0x7c], [7, 0x70], [8, 0x7f], [9, 0x7f], [10, 0x7f], [11, 0x7f], [12, 0x7e]]);
  assert.deepEqual(m.shape.tables.map((t) => [t.index, t.min, t.max]), [[0, 4, undefined], [1, 2, 16]]);
  assert.equal(m.shape.functionCount, 10 + 10);
  assert.deepEqual(m.shape.memory, { minPages: 1, maxPages: 64 });
  assert.equal(m.memoryPagesLimit, 3);
  // The instrumented module's memory maximum is the limit; the original exports are unchanged.
  const exported = WA.Module.exports(m.compiled).map((e) => e.name);
  assert.deepEqual(exported.slice(0, 7), ['memory', 'k32_alloc', 'k32_init', 'k32_restored', 'k32_tick', 'k32_event', 'k32_handle']);
  assert.deepEqual(m.exports.map((e) => e.name), exported.slice(0, 7));
  const imports = m.imports.map((i) => `${i.module}.${i.name} ${i.signature}`);
  assert.ok(imports.includes('k32.k32_handle') === false && imports.includes('k32.k32_time_ms () -> i64'));
});

test('refuses a memoryLimitBytes that is not a positive number', { timeout: 10_000 }, async () => {
  await assert.rejects(loadModule(wat(`(module ${TICK})`), { memoryLimitBytes: 0 }), RangeError);
});

test('instruments a module without code of its own (sections added in their place)', { timeout: 10_000 }, async () => {
  // An app pod whose entry point is an import, with a mutable f64 (which gets bit accessors) and data.
  const m = await loadModule(wat('(module (import "k32" "k32_time_ms" (func $t (result i64))) (global (mut f64) (f64.const 0)) (memory 1) (data (i32.const 0) "x") (export "_start" (func $t)))'));
  assert.equal(m.kind, 'app');
  assert.ok(WA.validate(m.instrumentedBytes));
  assert.equal(m.shape.functionCount, 1, 'the accessors are not functions of the module');
});

test('instrumentation keeps every index space of the original module (examples and WAT)', { timeout: 30_000 }, async () => {
  const { parseModule } = await import('../../src/wasm/binary.ts');
  const { example } = await import('./helpers.ts');
  for (const [name, bytes] of [['state.wat', wat('state.wat')], ['echo', example('echo')], ['counter', example('counter')], ['counter-c', example('counter-c')]] as const) {
    const m = await loadModule(bytes, { memoryLimitBytes: 4 << 20 });
    const a = parseModule(bytes);
    const b = parseModule(m.instrumentedBytes);
    assert.deepEqual(b.types.slice(0, a.types.length), a.types, `${name}: types`);
    assert.deepEqual(b.imports, a.imports, `${name}: imports`);
    assert.deepEqual(b.functionTypes.slice(0, a.functionTypes.length), a.functionTypes, `${name}: functions`);
    // Tables keep their type and size; their maximum is capped (MAX_TABLE_ENTRIES).
    assert.deepEqual(b.tables.map((x) => [x.elementType, x.limits.min]), a.tables.map((x) => [x.elementType, x.limits.min]), `${name}: tables`);
    for (const [i, x] of b.tables.entries()) assert.equal(x.limits.max, Math.min(a.tables[i]!.limits.max ?? 1 << 20, 1 << 20), `${name}: table ${i} maximum`);
    assert.deepEqual(b.globals, a.globals, `${name}: globals`);
    assert.deepEqual(b.exports.slice(0, a.exports.length), a.exports, `${name}: the module's own exports first`);
    assert.equal(b.memories[0]!.limits.min, a.memories[0]!.limits.min);
    assert.ok(b.memories[0]!.limits.max! <= 64, `${name}: memory capped at 4 MiB`);
    // The original code entries are there byte for byte (new functions are appended after them).
    const code = (x: typeof a, bytes: Uint8Array): Uint8Array => {
      const s = x.sections.find((y) => y.id === 10)!;
      return bytes.subarray(s.contentStart, s.end);
    };
    const before = code(a, bytes);
    const after = code(b, m.instrumentedBytes);
    const countLen = (x: Uint8Array): number => { let i = 0; while (x[i]! & 0x80) i++; return i + 1; };
    const hex = (x: Uint8Array): string => Buffer.from(x.buffer, x.byteOffset, x.byteLength).toString('hex');
    assert.equal(hex(after.subarray(countLen(after), countLen(after) + before.length - countLen(before))), hex(before.subarray(countLen(before))), `${name}: code`);
    // The data, element and custom sections are unchanged.
    for (const id of [0, 9, 11]) {
      const sa = a.sections.filter((y) => y.id === id).map((y) => Buffer.from(bytes.subarray(y.start, y.end)).toString('hex'));
      const sb = b.sections.filter((y) => y.id === id).map((y) => Buffer.from(m.instrumentedBytes.subarray(y.start, y.end)).toString('hex'));
      assert.deepEqual(sb, sa, `${name}: section ${id}`);
    }
  }
});
