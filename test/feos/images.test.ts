// The guest's image store (src/feos/guest/images.ts) against a real local registry (Debian's
// docker-registry on loopback, an image built here from busybox with umoci, pushed with skopeo): gzip
// and zstd layers unpacked and verified, the config taken, a pull by digest, a pull joining one in
// flight, a token gate passed with the right Bearer token and refused with a wrong one, and no token
// in any error. Runs on the host as any user (the guest runs the same code).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ImageStore, parseImageRef, PullError } from '../../src/feos/guest/index.ts';
import { tempDir } from './harness.ts';
import { buildBusyboxLayout, push, startRegistry } from './registry.ts';

const TOKEN = 'feos-test-token-3f9a1c';

test('parseImageRef takes references as Docker does', () => {
  assert.deepEqual(parseImageRef('busybox'), { registry: 'docker.io', repository: 'library/busybox', tag: 'latest', digest: '' });
  assert.deepEqual(parseImageRef('127.0.0.1:5000/private/app:v1'), { registry: '127.0.0.1:5000', repository: 'private/app', tag: 'v1', digest: '' });
  const d = `sha256:${'a'.repeat(64)}`;
  assert.deepEqual(parseImageRef(`ghcr.io/x/y@${d}`), { registry: 'ghcr.io', repository: 'x/y', tag: '', digest: d });
  assert.throws(() => parseImageRef('Bad/Ref'), PullError);
  assert.throws(() => parseImageRef(''), PullError);
});

test('the image store pulls from a local registry: gzip and zstd, by digest, joined, with and without a token', { timeout: 180_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-images-');
  const reg = await startRegistry(dir, TOKEN);
  t.after(async () => {
    await reg.stop();
    cleanup();
  });
  const layout = buildBusyboxLayout(dir);
  // zstd first: skopeo reuses a blob the registry has, in the compression it has it in.
  push(layout, reg.direct, 'public/busybox', 'zstd', 'zstd');
  push(layout, reg.direct, 'public/busybox', '1');
  push(layout, reg.direct, 'private/busybox', '1');
  const store = new ImageStore(join(dir, 'images'));

  // Two pulls of one reference at once: the second joins the first.
  const [a, b] = await Promise.all([store.pull(`${reg.gated}/public/busybox:1`), store.pull(`${reg.gated}/public/busybox:1`)]);
  assert.equal(a.cached, false);
  assert.equal(b.cached, true);
  assert.equal(a.image.digest, b.image.digest);
  assert.match(a.image.digest, /^sha256:[0-9a-f]{64}$/);
  assert.ok(existsSync(join(a.image.rootfs, 'bin', 'busybox')));
  assert.equal(readFileSync(join(a.image.rootfs, 'etc', 'image-name'), 'utf8'), 'busybox\n');
  assert.deepEqual(a.image.config.cmd, ['/bin/sh']);
  assert.ok(a.image.config.env.includes('FEOS_IMAGE=busybox'));
  // Again: from the store, no registry asked.
  const seen = reg.seenAuth.length;
  assert.equal((await store.pull(`${reg.gated}/public/busybox:1`)).cached, true);
  assert.equal(reg.seenAuth.length, seen);

  const z = await store.pull(`${reg.gated}/public/busybox:zstd`);
  assert.notEqual(z.image.digest, a.image.digest, 'zstd layers make another manifest');
  assert.ok(existsSync(join(z.image.rootfs, 'bin', 'sh')));

  const byDigest = await store.pull(`${reg.gated}/public/busybox@${a.image.digest}`);
  assert.equal(byDigest.image.digest, a.image.digest);

  // An image the registry does not have says so (it said only "GET manifests/2: HTTP 404").
  const missing = await store.pull(`${reg.gated}/public/busybox:2`).then(
    () => undefined,
    (err: unknown) => err,
  );
  assert.ok(missing instanceof PullError);
  assert.match(missing.message, new RegExp(`GET manifests/2: HTTP 404: no such image ${reg.gated.replaceAll('.', '\\.')}/public/busybox:2 in the registry$`));

  // The gate: no token, a wrong one, the right one.
  const noToken = await store.pull(`${reg.gated}/private/busybox:1`).then(
    () => undefined,
    (err: unknown) => err,
  );
  assert.ok(noToken instanceof PullError);
  assert.match(noToken.message, /HTTP 401: it needs a pull token/);
  assert.ok(reg.seenAuth.includes('Bearer anonymous'), "the anonymous pull took the registry's token");
  const wrong = 'wrong-token-77c1';
  const refused = await store.pull(`${reg.gated}/private/busybox:1`, { token: wrong }).then(
    () => undefined,
    (err: unknown) => err,
  );
  assert.ok(refused instanceof PullError);
  assert.match(refused.message, /the pull token was not accepted/);
  assert.ok(!refused.message.includes(wrong) && !String(refused.stack).includes(wrong), 'the token is in no error');
  assert.ok(reg.seenAuth.includes(`Bearer ${wrong}`), 'the token went to the registry as a Bearer token');
  const ok = await store.pull(`${reg.gated}/private/busybox:1`, { token: TOKEN });
  assert.ok(existsSync(join(ok.image.rootfs, 'bin', 'busybox')));
  assert.ok(!readFileSync(join(dir, 'images', ok.image.digest.slice(7), 'image.json'), 'utf8').includes(TOKEN), 'the token is not kept');
});
