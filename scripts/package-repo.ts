// A local apt repository of FeOS's packages (docs/feos/packages.md; seed 000, "Packages": one suite,
// stable, the component main, signed by a key of its own):
//   node scripts/package-repo.ts [--debs DIR]... [--out DIR] [--key-dir DIR]
// copies the .deb files of each --debs (dist/deb by default) into OUT/pool/main/, keeping those there
// from before, and writes dists/stable/main/binary-amd64/Packages(.gz) (dpkg-scanpackages), Release,
// InRelease and Release.gpg, signed with the key in --key-dir (dist/apt-key, a GnuPG home of mode 0700,
// made with a new throwaway key where there is none), whose public key is OUT/feos.gpg:
//   deb [signed-by=OUT/feos.gpg] file:OUT stable main
// Prints OUT. The key never goes into OUT; gpg's agent for the key dir is ended before it returns.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { gzipSync } from 'node:zlib';

const REPO = resolve(import.meta.dirname, '..');
const { values: args } = (() => {
  try {
    return parseArgs({
      options: {
        debs: { type: 'string', multiple: true },
        out: { type: 'string', default: join(REPO, 'dist/apt') },
        'key-dir': { type: 'string', default: join(REPO, 'dist/apt-key') },
      },
    });
  } catch (err: unknown) {
    // A flag mistyped, or one without its value: say which, and how it is run, not a stack.
    process.stderr.write(`package-repo: ${err instanceof Error ? err.message : String(err)}\nusage: node scripts/package-repo.ts [--debs DIR]... [--out DIR] [--key-dir DIR]\n`);
    process.exit(2);
  }
})();
const out = resolve(args.out);
const keyDir = resolve(args['key-dir']);
const debDirs = (args.debs ?? [join(REPO, 'dist/deb')]).map((d) => resolve(d));
const UID = 'FeOS local repository <feos@kube32.invalid>';

/** Writes `path` whole: a temporary file beside it, then a rename. */
function writeWhole(path: string, data: string | Buffer): void {
  writeFileSync(`${path}.tmp`, data);
  renameSync(`${path}.tmp`, path);
}

const gpg = (...a: string[]) => execFileSync('gpg', ['--homedir', keyDir, '--batch', '--yes', '--no-tty', ...a], { stdio: ['ignore', 'pipe', 'pipe'] });
try {
  const pool = join(out, 'pool/main');
  mkdirSync(pool, { recursive: true });
  let copied = 0;
  for (const dir of debDirs) {
    if (!existsSync(dir)) throw new Error(`--debs ${dir}: no such directory (npm run package makes dist/deb)`);
    for (const f of readdirSync(dir).filter((f) => f.endsWith('.deb'))) {
      copyFileSync(join(dir, f), join(pool, f));
      copied++;
    }
  }
  if (copied === 0 && readdirSync(pool).length === 0) throw new Error(`no .deb in ${debDirs.join(', ')}: run npm run package first`);

  const bin = join(out, 'dists/stable/main/binary-amd64');
  mkdirSync(bin, { recursive: true });
  const packages = execFileSync('dpkg-scanpackages', ['--multiversion', 'pool'], { cwd: out, stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 * 1024 * 1024 });
  writeWhole(join(bin, 'Packages'), packages);
  writeWhole(join(bin, 'Packages.gz'), gzipSync(packages));

  const index = ['main/binary-amd64/Packages', 'main/binary-amd64/Packages.gz'].map((p) => ({ p, data: readFileSync(join(out, 'dists/stable', p)) }));
  const sums = (algo: string) => index.map(({ p, data }) => ` ${createHash(algo).update(data).digest('hex')} ${String(data.length).padStart(16)} ${p}`).join('\n');
  const release = [
    'Origin: FeOS',
    'Label: FeOS',
    'Suite: stable',
    'Codename: stable',
    `Date: ${new Date().toUTCString()}`,
    'Architectures: amd64',
    'Components: main',
    'Description: FeOS packages (local repository)',
    'MD5Sum:',
    sums('md5'),
    'SHA256:',
    sums('sha256'),
    '',
  ].join('\n');
  const dists = join(out, 'dists/stable');
  writeWhole(join(dists, 'Release'), release);

  // The key: a GnuPG home of its own, 0700, its files 0600; made once, with a key that never expires.
  if (!existsSync(join(keyDir, 'pubring.kbx'))) {
    mkdirSync(keyDir, { recursive: true, mode: 0o700 });
    chmodSync(keyDir, 0o700);
    gpg('--passphrase', '', '--quick-generate-key', UID, 'ed25519', 'sign', 'never');
  }
  for (const f of readdirSync(keyDir, { recursive: true, withFileTypes: true })) chmodSync(join(f.parentPath, f.name), f.isDirectory() ? 0o700 : 0o600);
  gpg('--local-user', UID, '--clearsign', '--output', join(dists, 'InRelease.tmp'), join(dists, 'Release'));
  renameSync(join(dists, 'InRelease.tmp'), join(dists, 'InRelease'));
  gpg('--local-user', UID, '--armor', '--detach-sign', '--output', join(dists, 'Release.gpg.tmp'), join(dists, 'Release'));
  renameSync(join(dists, 'Release.gpg.tmp'), join(dists, 'Release.gpg'));
  writeWhole(join(out, 'feos.gpg'), gpg('--export', UID));
  process.stdout.write(`${out}\n`);
} catch (err: unknown) {
  const e = err as { message?: string; stderr?: Buffer };
  process.stderr.write(`package-repo: ${e.stderr?.toString().trim() || e.message}\n`);
  process.exitCode = 1;
} finally {
  try {
    execFileSync('gpgconf', ['--homedir', keyDir, '--kill', 'gpg-agent'], { stdio: 'ignore' });
  } catch {}
}
