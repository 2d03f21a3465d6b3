// A pod's metadata from feosctl (`pod create --metadata KEY=VALUE`, `--metadata-file`) within the seed's
// limits ("Metadata": keys of 1 to 128 letters, digits, '-', '_', '.'; 32 KiB as JSON), INVALID_ARGUMENT
// beyond from feosctl and from feosd; and a volume's labels within Kubernetes' label rules
// (src/feos/volumes/labels.ts). feosd runs without QEMU (the pods stay PENDING: no guest).
import assert from 'node:assert/strict';
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { makeClient } from '../../src/feos/api/index.ts';
import { VolumeService } from '../../src/feos/gen/feos/volume/v1/volume_pb.js';
import { feosctl, startFeosd, tempDir } from './harness.ts';

const code = (e: unknown) => (e as { code?: number }).code;
const GiB = 1024n ** 3n;

test('pod create --metadata and --metadata-file: the pod has them; keys and sizes beyond the limits are refused by feosctl and feosd', { timeout: 120_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-metadata-');
  t.after(cleanup);
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));

  await t.test('the flags over the file over -f, a value with "=" and an empty one', async () => {
    const file = join(dir, 'meta.yaml');
    // Numbers stay as written: 1.10 is not 1.1, 01234 not 1234, and a 20-digit number loses no digits.
    writeFileSync(file, 'role: db\nport: 5432\nzone: a\nversion: 1.10\nzip: 01234\nbig: 12345678901234567890\n');
    const spec = join(dir, 'pod.yaml');
    writeFileSync(spec, 'metadata:\n  owner: ops\n  zone: spec\n');
    const r = await feosctl(feosd.socket, ['pod', 'create', '--id', 'mdpqd0aaaaa', '-f', spec, '--metadata-file', file, '--metadata', 'role=web', '--metadata', 'query=a=b', '--metadata', 'empty=', '-o', 'json']);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout).spec.metadata, {
      owner: 'ops',
      zone: 'a',
      role: 'web',
      port: '5432',
      version: '1.10',
      zip: '01234',
      big: '12345678901234567890',
      query: 'a=b',
      empty: '',
    });
    const got = await feosd.pods.getPod({ id: 'mdpqd0aaaaa' });
    assert.equal(got.pod?.spec?.metadata.query, 'a=b');
  });

  await t.test('feosctl refuses a bad key, a missing "=", a file that is no mapping and more than 32 KiB, exit 1, nothing sent', async () => {
    const big = join(dir, 'big.json');
    writeFileSync(big, JSON.stringify({ blob: 'x'.repeat(33 * 1024) }));
    const list = join(dir, 'list.yaml');
    writeFileSync(list, '- a\n- b\n');
    for (const [args, want] of [
      [['--metadata', 'has space=x'], /--metadata "has space=x": key "has space": want 1 to 128 letters, digits, '-', '_' and '\.'/],
      [['--metadata', `${'k'.repeat(129)}=x`], /want 1 to 128 letters/],
      [['--metadata', '=x'], /key "": want 1 to 128/],
      [['--metadata', 'novalue'], /--metadata "novalue": want KEY=VALUE/],
      [['--metadata-file', list], /--metadata-file .*list\.yaml: want a mapping of keys to strings/],
      [['--metadata-file', join(dir, 'none.yaml')], /--metadata-file .*none\.yaml: ENOENT/],
      [['--metadata-file', big], /metadata: \d+ bytes as JSON, more than 32768 \(32 KiB\)/],
    ] as const) {
      const r = await feosctl(feosd.socket, ['pod', 'create', '--id', 'mdpqd0aaaab', ...args]);
      assert.equal(r.code, 1, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, want);
    }
    assert.ok(!readdirSync(join(feosd.stateDir, 'pods')).some((f) => f.startsWith('mdpqd0aaaab')), 'nothing was recorded');
  });

  await t.test('feosd refuses the same from any client: INVALID_ARGUMENT', async () => {
    for (const [metadata, want] of [
      [{ 'a/b': 'x' }, /metadata key "a\/b"/],
      [{ blob: 'x'.repeat(33 * 1024) }, /metadata: more than 32 KiB as JSON/],
    ] as const) {
      await assert.rejects(feosd.pods.createPod({ id: 'mdpqd0aaaac', spec: { metadata } }), (e) => {
        assert.equal(code(e), status.INVALID_ARGUMENT);
        assert.match(String(e), want);
        return true;
      });
    }
    // 32 KiB exactly is taken.
    const at = 32 * 1024 - JSON.stringify({ blob: '' }).length;
    const ok = await feosd.pods.createPod({ id: 'mdpqd0aaaad', spec: { metadata: { blob: 'x'.repeat(at) } } });
    assert.equal(ok.pod?.spec?.metadata.blob.length, at);
  });
});

test("volume labels: Kubernetes' rules, at most 64; a 120 KB label or 3 000 labels are INVALID_ARGUMENT and nothing is recorded", { timeout: 120_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-labels-');
  t.after(cleanup);
  const feosd = await startFeosd(dir);
  t.after(() => feosd.stop('SIGKILL'));
  const volumes = makeClient(VolumeService, `unix:${feosd.socket}`);
  t.after(() => volumes.grpc.close());
  const id = '0e9c4f3e-1111-4222-8333-444455556666';
  const many: Record<string, string> = {};
  for (let i = 0; i < 3000; i++) many[`k${i}`] = 'v';
  for (const [labels, want] of [
    [{ big: 'x'.repeat(120_000) }, /volume .*: label "big": its value \(120000 characters\) must be empty or at most 63/],
    [many, /3000 labels, at most 64/],
    [{ ['k'.repeat(64)]: 'v' }, /label key "k{64}": its name must be 1 to 63/],
    [{ 'Example.com/tier': 'a' }, /its prefix must be a DNS subdomain/],
    [{ '-tier': 'a' }, /beginning and ending with a letter or digit/],
    [{ tier: 'a b' }, /label "tier": its value/],
  ] as const) {
    await assert.rejects(volumes.createVolume({ id, sizeBytes: GiB, labels }), (e) => {
      assert.equal(code(e), status.INVALID_ARGUMENT, String(e));
      assert.match(String(e), want);
      return true;
    });
  }
  const cli = await feosctl(feosd.socket, ['volume', 'create', id, '--size', '1Gi', '--label', `big=${'x'.repeat(100)}`]);
  assert.equal(cli.code, 1);
  assert.match(cli.stderr, /^feosctl: INVALID_ARGUMENT: volume 0e9c4f3e-.*: label "big": its value \(100 characters\)/);
  assert.equal((await volumes.listVolumes({})).volumes.length, 0);
  // What Kubernetes takes is taken: a prefix, '.', '_' and '-' inside, an empty value, 64 labels.
  const fine: Record<string, string> = { 'feos.example.com/tier': 'gold', app_name: 'my.app-1', empty: '' };
  for (let i = 0; i < 61; i++) fine[`k${i}`] = 'v';
  const made = await volumes.createVolume({ id, sizeBytes: GiB, labels: fine });
  assert.equal(Object.keys(made.volume!.labels).length, 64);
});
