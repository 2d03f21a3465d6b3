// `kube32-cli snapshot inspect` as a user runs it: a real process, files and standard input.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parse as parseYaml } from 'yaml';
import { encodeSnapshot } from '../../src/k32s/index.ts';
import { GOLDEN_A } from './golden.ts';

const CLI = new URL('../../bin/kube32-cli.js', import.meta.url).pathname;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs kube32-cli with `args`, feeding `stdin`; bounded by a 20 s kill. */
function cli(args: string[], stdin?: Uint8Array): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['pipe', 'pipe', 'pipe'], timeout: 20_000 });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (b: Buffer) => out.push(b));
    child.stderr.on('data', (b: Buffer) => err.push(b));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() }));
    child.stdin.on('error', () => {}); // the CLI may stop reading early on a bad snapshot
    child.stdin.end(stdin ?? new Uint8Array(0));
  });
}

describe('kube32-cli snapshot inspect', { timeout: 60_000 }, () => {
  it('prints the header and a table of sections, and exits 0 for a good snapshot', async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'k32s-cli-'));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const file = join(dir, 'echo.k32s');
    await writeFile(file, GOLDEN_A);
    const r = await cli(['snapshot', 'inspect', file]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^Version: +1$/m);
    assert.match(r.stdout, /^Image SHA-256: +93a44bbb96c751218e4c00d479e4c14358122a389acca16205b1e4d0dc5f9476$/m);
    assert.match(r.stdout, /^Memory: +16 bytes \(1 page\)$/m);
    assert.match(r.stdout, /^Pod time: +1234567 ms$/m);
    assert.match(r.stdout, /^Taken at: +2026-11-29T14:00:00\.000Z/m);
    assert.match(r.stdout, /^Trailer: +ok$/m);
    const table = r.stdout.slice(r.stdout.indexOf('SECTION')).trimEnd().split('\n');
    assert.deepEqual(
      table.map((line) => line.split(/ {3,}/).slice(0, 4)),
      [
        ['SECTION', 'TYPE', 'OFFSET', 'LENGTH'],
        ['MEMORY', '1', '68', '16'],
        ['GLOBALS', '2', '90', '26'],
        ['TABLE', '3', '122', '16'],
        ['CHANNELS', '4', '144', '10'],
        ['EVENTS', '5', '160', '9'],
      ],
    );
    assert.equal(r.stderr, '');
  });

  it('-o json and -o yaml give the facts and small sections to programs, from standard input', async () => {
    const json = await cli(['snapshot', 'inspect', '-', '-o', 'json'], GOLDEN_A);
    assert.equal(json.code, 0, json.stderr);
    const obj = JSON.parse(json.stdout);
    assert.equal(obj.snapshotSha256, '43dcfee7870671193fb6c47917587d17f77d8efcb9f044b2967446035c3e78e1');
    assert.equal(obj.podTimeMs, 1234567);
    assert.equal(obj.sizeBytes, 207);
    assert.deepEqual(obj.globals, [
      { index: 0, type: 'i32', bits: '0xffffffff' },
      { index: 3, type: 'f64', bits: '0x3ff8000000000000' },
    ]);
    assert.deepEqual(obj.tables, [{ index: 0, size: 2, entries: [3, null] }]);
    assert.deepEqual(obj.channels, [{ handle: 1, name: 'temp' }]);
    assert.deepEqual(obj.events, [{ topic: 't', payloadBytes: 2, payloadBase64: 'aGk=' }]);
    const yaml = await cli(['snapshot', 'inspect', '-', '-o', 'yaml'], GOLDEN_A);
    assert.equal(yaml.code, 0, yaml.stderr);
    assert.match(yaml.stdout, /^trailerOk: true$/m);
    // Read back as YAML 1.1 (kubectl's go-yaml v2, PyYAML), the same object: unixTime was written bare
    // and came back a timestamp, not its string.
    assert.match(yaml.stdout, /^unixTime: "\d{4}-\d\d-\d\dT[\d:.]+Z"$/m);
    assert.deepEqual(parseYaml(yaml.stdout, { version: '1.1' }), obj);
  });

  it('streams a large snapshot from standard input', async () => {
    const memory = new Uint8Array(8 << 20).fill(7);
    const state = { imageSha256: new Uint8Array(32), memory, memoryPages: 128, podTimeMs: 5n, unixTimeMs: 0n, globals: [], tables: [], channels: [], events: [] };
    const bytes = new Uint8Array(Buffer.concat([...encodeSnapshot(state)]));
    const r = await cli(['snapshot', 'inspect', '-'], bytes);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^Memory: +8388608 bytes \(128 pages\)$/m);
    assert.match(r.stdout, /^Taken at: +<unset>$/m);
  });

  it('shows names from a snapshot without passing terminal control characters through', async () => {
    const state = {
      imageSha256: new Uint8Array(32),
      memory: new Uint8Array(0),
      memoryPages: 0,
      podTimeMs: 0n,
      unixTimeMs: 0n,
      globals: [],
      tables: [],
      channels: [{ handle: 7, name: '\u001b[2Jevil' }],
      events: [{ topic: 'bell\u0007', payload: new Uint8Array(3) }],
    };
    const r = await cli(['snapshot', 'inspect', '-'], new Uint8Array(Buffer.concat([...encodeSnapshot(state)])));
    assert.equal(r.code, 0, r.stderr);
    assert.doesNotMatch(r.stdout, /[\u0000-\u0009\u000b-\u001f]/);
    assert.match(r.stdout, /1 channel: 7=\\u001b\[2Jevil/);
    assert.match(r.stdout, /1 held event: bell\\u0007 \(3 bytes\)/);
  });

  it('exits 1 with the reader message for a cut, a stranger, or a damaged snapshot', async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'k32s-cli-'));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const cut = join(dir, 'cut.k32s');
    await writeFile(cut, GOLDEN_A.subarray(0, 150));
    let r = await cli(['snapshot', 'inspect', cut]);
    assert.equal(r.code, 1);
    assert.equal(r.stdout, '');
    assert.equal(r.stderr, `error: ${cut}: the snapshot ends before its trailer: the stream ended after 150 bytes, inside the CHANNELS section at byte 144 (10 of its 10 bytes missing)\n`);

    r = await cli(['snapshot', 'inspect', '-'], new TextEncoder().encode('{"kind":"Status"}'));
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^error: standard input: not a K32S snapshot: it starts with bytes 7b226b69, not the magic "K32S"/);

    const flipped = GOLDEN_A.slice();
    flipped[80]! ^= 1;
    r = await cli(['snapshot', 'inspect', '-'], flipped);
    assert.equal(r.code, 1);
    assert.match(r.stdout, /^Trailer: +does not match the contents \(computed [0-9a-f]{64}\)$/m);
    assert.equal(r.stderr, "error: standard input: the snapshot's trailer does not match its contents (damaged in transfer or storage)\n");
  });

  it('exits 1 for a missing file and an unknown output format', async () => {
    let r = await cli(['snapshot', 'inspect', '/nonexistent/x.k32s']);
    assert.equal(r.code, 1);
    assert.equal(r.stderr, 'error: /nonexistent/x.k32s: no such file\n');
    r = await cli(['snapshot', 'inspect', '-', '-o', 'wide'], GOLDEN_A);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /unable to match a printer suitable for the output format "wide", allowed formats are: json,yaml/);
  });
});
