// A hibernation cuts and uploads QEMU's stream while QEMU still writes it (checkpoint.ts, growingFileChunks): a
// file read as a real writer (`cat`, as QEMU's `exec:cat >` writes the stream) appends to it is stored as the very
// chunks of the whole file; a writer that fails ends the reading with its error; a file that never came is ENOENT.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import { LocalDirObjectStore, PackWriter } from '../store/index.ts';
import { fileChunks, growingFileChunks } from './checkpoint.ts';
import { tempDir } from '../../../test/feos/harness.ts';

test('a file read as cat writes it is stored as the chunks of the whole file; a writer that fails or never writes ends it', { timeout: 120_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-growing-');
  t.after(cleanup);
  const store = new LocalDirObjectStore(pathToFileURL(join(dir, 'store')).href);
  const path = join(dir, 'vmstate');
  const bytes = randomBytes(24 << 20);
  // cat writes what it reads from its stdin, piece by piece, as QEMU's stream comes; it ends when its stdin does.
  const cat = spawn('sh', ['-c', `cat > '${path}'`], { stdio: ['pipe', 'ignore', 'inherit'] });
  const written = new Promise<void>((resolve, reject) => {
    cat.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`cat exited ${code}`))));
  });
  const growing = new PackWriter(store, 'pods/growingf0aa/packs', new Map());
  const reading = growing.putFile(growingFileChunks(path, written));
  for (let i = 0; i < bytes.length; i += 300_001) {
    const piece = bytes.subarray(i, i + 300_001);
    if (!cat.stdin.write(piece)) await new Promise((r) => cat.stdin.once('drain', r));
  }
  cat.stdin.end();
  const got = await reading;
  await growing.finish();
  const whole = await new PackWriter(store, 'pods/growingf0ab/packs', new Map()).putFile(fileChunks(path));
  assert.equal(got.sizeBytes, bytes.length);
  assert.equal(got.sha256, whole.sha256);
  assert.deepEqual(
    got.chunks.map((c) => [c.sizeBytes, c.sha256]),
    whole.chunks.map((c) => [c.sizeBytes, c.sha256]),
    'the same chunks as the whole file',
  );

  // The writer failed: its error, not a short file taken as whole.
  const failing = Promise.reject(new Error('snapshot: migration failed'));
  await assert.rejects(async () => {
    for await (const _ of growingFileChunks(path, failing)) {
    }
  }, /migration failed/);
  // Done, and no file: ENOENT.
  await assert.rejects(async () => {
    for await (const _ of growingFileChunks(join(dir, 'never'), Promise.resolve())) {
    }
  }, (e: NodeJS.ErrnoException) => e.code === 'ENOENT');
  // Aborted: the signal's reason.
  const ac = new AbortController();
  ac.abort(new Error('abandoned'));
  await assert.rejects(async () => {
    for await (const _ of growingFileChunks(path, new Promise(() => {}), ac.signal)) {
    }
  }, /abandoned/);
});
