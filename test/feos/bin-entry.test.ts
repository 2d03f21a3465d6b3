// The bins run dist/ only when it was built from the sources they are built from as they are now (feosd/feosctl:
// src/feos and src/lib; kube32-cli/kube32-sim: every folder of src/ but feos), by the build's stamp
// (dist/.build-stamp, `node bin/fresh-entry.js prepare|commit` around tsc): after a `git pull` without `npm run
// build` they ran the code before the pull (a trial's feosd lacked a fix its freshly built guest had; a
// helper's test runs of kube32-sim ran a dist/ of hours before), and a change with an older mtime than dist/
// (a tar or `cp -p` of older files) went unseen by the file times they compared before. Checked on a copy of
// the layout with stand-in mains.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { tempDir } from './harness.ts';

const REPO = new URL('../../', import.meta.url).pathname;

test('the bins run dist/ when it was built from the sources as they are, else the sources', { timeout: 60_000 }, async (t) => {
  const { dir, cleanup } = tempDir('feos-bin-');
  t.after(cleanup);
  for (const [bin, main, other, said] of [
    ['feosd', 'feos/main', 'lib/index.ts', 'feosd: dist/ was not built from these sources (run npm run build); running the sources\n'],
    ['feosctl', 'feos/ctl/main', 'lib/index.ts', ''],
    ['kube32-sim', 'kubelet/main', 'wasm/index.ts', 'kube32-sim: dist/ was not built from these sources (run npm run build); running the sources\n'],
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
    /** The build's steps around tsc, as `npm run build` runs them. */
    const stamp = () => {
      for (const step of ['prepare', 'commit']) {
        const r = spawnSync(process.execPath, [join(root, 'bin/fresh-entry.js'), step], { encoding: 'utf8', timeout: 20_000 });
        assert.equal(r.status, 0, r.stderr);
      }
    };
    const at = (f: string, s: number) => utimesSync(f, s, s);
    assert.equal(run(), 'src', `${bin}: a dist/ without a stamp (a build that did not finish) is passed over`);
    at(src, 1000);
    at(lib, 1000);
    stamp();
    at(built, 2000);
    assert.equal(run(), 'dist', `${bin}: a fresh build runs`);
    writeFileSync(src, "export function main(): void { process.stdout.write('SRC'); }\n");
    at(src, 500);
    assert.equal(run(), 'SRC', `${bin}: a source changed since the build, with an older mtime than dist/, runs from source`);
    assert.equal(stderr, said, 'the daemons say so; the CLIs keep quiet');
    writeFileSync(src, "export function main(): void { process.stdout.write('src'); }\n");
    at(src, 3000);
    assert.equal(run(), 'dist', `${bin}: the content the build had, with other times, is fresh`);
    writeFileSync(lib, 'export const x = 1;\n');
    at(lib, 1000);
    assert.equal(run(), 'src', `${bin}: src/${other} counts too`);
    writeFileSync(lib, 'export {};\n');
    assert.equal(run(), 'dist');
    const added = join(root, 'src', other, '../added.ts');
    writeFileSync(added, 'export {};\n');
    assert.equal(run(), 'src', `${bin}: a source added since the build counts`);
    rmSync(added);
    assert.equal(run(), 'dist');
    rmSync(lib);
    assert.equal(run(), 'src', `${bin}: a source removed since the build counts`);
    writeFileSync(lib, 'export {};\n');
    assert.equal(run(), 'dist');
    if (bin.startsWith('kube32')) {
      // FeOS's sources are not Kube32's: a change there leaves the build in use.
      const feos = join(root, 'src/feos/main.ts');
      mkdirSync(join(feos, '..'), { recursive: true });
      writeFileSync(feos, 'export {};\n');
      assert.equal(run(), 'dist', `${bin}: a new src/feos file does not count`);
    }
  }
});
