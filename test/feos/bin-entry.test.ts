// The bins run dist/ only when it is not older than the sources they are built from (feosd/feosctl: src/feos
// and src/lib; kube32-cli/kube32-sim: every folder of src/ but feos): after a `git pull` without `npm run
// build` they ran the code before the pull (a trial's feosd lacked a fix its freshly built guest had; a
// helper's test runs of kube32-sim ran a dist/ of hours before). Checked on a copy of the layout with
// stand-in mains.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { tempDir } from './harness.ts';

const REPO = new URL('../../', import.meta.url).pathname;

test('the bins run dist/ when it is fresh and the sources when a source is newer', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-bin-');
  t.after(cleanup);
  for (const [bin, main, other, said] of [
    ['feosd', 'feos/main', 'lib/index.ts', 'feosd: dist/ is older than src/ (run npm run build); running the sources\n'],
    ['feosctl', 'feos/ctl/main', 'lib/index.ts', ''],
    ['kube32-sim', 'kubelet/main', 'wasm/index.ts', 'kube32-sim: dist/ is older than src/ (run npm run build); running the sources\n'],
    ['kube32-cli', 'cli/main', 'apiserver/index.ts', ''],
  ] as const) {
    const root = join(dir, bin);
    mkdirSync(join(root, 'bin'), { recursive: true });
    for (const f of [`${bin}.js`, 'fresh-entry.js']) copyFileSync(join(REPO, 'bin', f), join(root, 'bin', f));
    writeFileSync(join(root, 'package.json'), '{"type": "module"}\n');
    const built = join(root, 'dist/src', `${main}.js`);
    const src = join(root, 'src', `${main}.ts`);
    const lib = join(root, 'src', other);
    for (const f of [built, src, lib]) mkdirSync(join(f, '..'), { recursive: true });
    writeFileSync(built, "export function main() { process.stdout.write('dist'); }\n");
    writeFileSync(src, "export function main(): void { process.stdout.write('src'); }\n");
    writeFileSync(lib, 'export {};\n');
    let stderr = '';
    const run = () => {
      const r = spawnSync(process.execPath, [join(root, 'bin', `${bin}.js`)], { encoding: 'utf8', timeout: 20_000 });
      assert.equal(r.status, 0, r.stderr);
      stderr = r.stderr;
      return r.stdout;
    };
    const at = (f: string, s: number) => utimesSync(f, s, s);
    at(src, 1000);
    at(lib, 1000);
    at(built, 2000);
    assert.equal(run(), 'dist', `${bin}: a fresh build runs`);
    at(src, 3000);
    assert.equal(run(), 'src', `${bin}: a source newer than the build runs from source`);
    assert.equal(stderr, said, 'the daemons say so; the CLIs keep quiet');
    at(src, 1000);
    at(lib, 3000);
    assert.equal(run(), 'src', `${bin}: src/${other} counts too`);
    if (bin.startsWith('kube32')) {
      // FeOS's sources are not Kube32's: a newer one leaves the build in use.
      at(lib, 1000);
      const feos = join(root, 'src/feos/main.ts');
      mkdirSync(join(feos, '..'), { recursive: true });
      writeFileSync(feos, 'export {};\n');
      at(feos, 3000);
      assert.equal(run(), 'dist', `${bin}: a newer src/feos does not count`);
    }
  }
});
