// K32S with the real pod runtime: the request pod of docs/pod-abi.md, built with wat2wasm, is frozen
// and snapshotted by src/wasm; the K32S reader, `kube32-cli snapshot inspect` and a restore on a second
// instance all agree on its state, and a damaged snapshot is refused with the seed's message.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { decodeSnapshot, toHex } from '../../src/k32s/index.ts';
import { loadModule, PodInstance, PodStartError } from '../../src/wasm/index.ts';

const hasWat2wasm = spawnSync('wat2wasm', ['--version']).status === 0;
const REQUEST = new TextEncoder().encode('GET / HTTP/1.1\r\nhost: hello\r\n\r\n');
const statusLine = (b: Uint8Array): string => new TextDecoder().decode(b).split('\r\n')[0]!;

async function* stream(chunks: Uint8Array[]): AsyncGenerator<Uint8Array> {
  yield* chunks;
}

describe('K32S with the pod runtime', { timeout: 60_000, skip: hasWat2wasm ? false : 'wat2wasm (Debian wabt) is not installed' }, () => {
  it("the ABI page's pod snapshots, inspects and restores with its count", async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'k32s-runtime-'));
    const pods: PodInstance[] = [];
    t.after(async () => {
      await Promise.all(pods.map((p) => p.terminate()));
      await rm(dir, { recursive: true, force: true });
    });
    const doc = await readFile(new URL('../../docs/pod-abi.md', import.meta.url), 'utf8');
    const wat = /```wat\n([\s\S]*?)```/.exec(doc)?.[1];
    assert.ok(wat, 'docs/pod-abi.md has a wat example');
    await writeFile(join(dir, 'hello.wat'), wat);
    execFileSync('wat2wasm', [join(dir, 'hello.wat'), '-o', join(dir, 'hello.wasm')]);
    const wasm = await readFile(join(dir, 'hello.wasm'));
    const module = await loadModule(wasm, { memoryLimitBytes: 1 << 20 });

    const pod = await PodInstance.start({ module, namespace: 'default', podName: 'hello', containerName: 'hello' });
    pods.push(pod);
    for (let i = 0; i < 3; i++) assert.equal(statusLine(await pod.handle(REQUEST)), 'HTTP/1.1 200 OK');
    await pod.freeze(5000);
    pod.event('alerts', new TextEncoder().encode('held while frozen'));
    const snap = await pod.snapshot({ digest: true });
    const chunks: Uint8Array[] = [];
    for await (const c of snap.chunks) chunks.push(c);
    const bytes = Buffer.concat(chunks);
    assert.equal(bytes.length, snap.byteLength);

    const d = await decodeSnapshot([bytes], { expectedImageSha256: createHash('sha256').update(wasm).digest() });
    assert.equal(toHex(d.header.imageSha256), snap.imageSha256);
    assert.equal(toHex(d.snapshotSha256), snap.snapshotSha256);
    assert.equal(Number(d.header.podTimeMs), snap.podTimeMs);
    assert.equal(d.header.memoryPages, 1);
    assert.deepEqual(d.globals, [{ index: 0, type: 0x7f, bits: 3n }], 'the request counter is global 0');
    assert.deepEqual(
      d.events.map((e) => [e.topic, new TextDecoder().decode(e.payload)]),
      [['alerts', 'held while frozen']],
    );

    const file = join(dir, 'hello.k32s');
    await writeFile(file, bytes);
    const cli = spawnSync(process.execPath, [new URL('../../bin/kube32-cli.js', import.meta.url).pathname, 'snapshot', 'inspect', file], {
      encoding: 'utf8',
      timeout: 20_000,
    });
    assert.equal(cli.status, 0, cli.stderr);
    assert.match(cli.stdout, new RegExp(`^Snapshot SHA-256: +${snap.snapshotSha256}$`, 'm'));
    assert.match(cli.stdout, /^GLOBALS +2 +65610 +13 +1 global \(1 i32\)$/m);

    const restored = await PodInstance.start({ module, namespace: 'default', podName: 'hello', containerName: 'hello', restoreFrom: stream(chunks) });
    pods.push(restored);
    assert.equal(statusLine(await restored.handle(REQUEST)), 'HTTP/1.1 200 OK');
    await restored.freeze(5000);
    const again: Uint8Array[] = [];
    for await (const c of (await restored.snapshot()).chunks) again.push(c);
    assert.deepEqual((await decodeSnapshot(again)).globals, [{ index: 0, type: 0x7f, bits: 4n }], 'the count went on from 3');

    const damaged = Buffer.from(bytes);
    damaged[1000]! ^= 0x10;
    await assert.rejects(
      PodInstance.start({ module, namespace: 'default', podName: 'hello', containerName: 'hello', restoreFrom: stream([damaged]) }),
      (e: unknown) =>
        e instanceof PodStartError &&
        e.reason === 'RestoreError' &&
        e.message === "cannot restore the snapshot: the snapshot's trailer does not match its contents (damaged in transfer or storage)",
    );
  });
});
