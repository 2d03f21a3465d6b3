// The entry point of the thin executables (bin/*.js): the built module when `npm run build` has made it from
// the sources as they are now, else the TypeScript source (Node.js 24 strips types). A dist/ built from other
// sources (a `git pull` or an edit without a build, a checkout of older files) would run the code before it:
// feosd beside a guest built from the new sources, kube32-sim and kube32-cli without the fix just pulled.
//
// The build's stamp (dist/.build-stamp, written by `npm run build`: `node bin/fresh-entry.js prepare|commit`)
// says what dist/ was built from: each .ts/.js file of src/ with its size, mtime, ctime and SHA-1. At start a
// file whose size and times are the stamp's is taken as unchanged without reading it (a change sets ctime,
// which no tool sets back); another is read and its hash compared, so a change with an older mtime (a tar or
// `cp -p` of older files, `touch -d`) counts, and a checkout of the same content does not. A file added or
// removed counts. No stamp (an interrupted build, a dist/ built before stamps) means the sources run.
import { existsSync, fsyncSync, openSync, closeSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';

const root = new URL('../', import.meta.url);

/** The stamp's path, and where `prepare` leaves it until the build succeeded. */
const STAMP = 'dist/.build-stamp';
const NEXT = 'dist/.build-stamp.next';

/** The folders of src/ that FeOS's executables are built from. */
export const FEOS_SOURCES = ['feos', 'lib'];
/** The folders of src/ that Kube32's executables (kube32-cli, kube32-sim) are built from: all but FeOS's own. */
export const KUBE32_SOURCES = ['apiserver', 'cli', 'controllers', 'k32s', 'kubelet', 'lib', 'wasm'];

/** The .ts and .js files under `dir` (an absolute path), each with its stat; none when it does not exist. */
const sourceFiles = (dir) =>
  existsSync(dir)
    ? readdirSync(dir, { withFileTypes: true, recursive: true })
        .filter((e) => e.isFile() && /\.[jt]s$/.test(e.name))
        .map((e) => {
          const path = `${e.parentPath}/${e.name}`;
          return { path, st: statSync(path) };
        })
    : [];

// node:crypto is loaded only when a file must be hashed: its import is most of a start's cost otherwise (measured 30-50 ms).
const sha1 = (path) => process.getBuiltinModule('node:crypto').createHash('sha1').update(readFileSync(path)).digest('hex');

/**
 * The stamp of `<base>/src` now: by path below src/, `[size, mtimeMs, ctimeMs, sha1]`.
 * @param {URL} base the tree's root
 * @returns {Record<string, [number, number, number, string]>}
 */
export function stampOf(base = root) {
  const src = new URL('src', base).pathname;
  const files = {};
  for (const { path, st } of sourceFiles(src)) files[path.slice(src.length + 1)] = [st.size, st.mtimeMs, st.ctimeMs, sha1(path)];
  return files;
}

/**
 * Whether the sources below `src/<dir>` for each of `sources` are what `stamp` recorded.
 * @param {Record<string, [number, number, number, string]>} stamp
 * @param {readonly string[]} sources
 * @param {URL} base the tree's root
 */
function sameSources(stamp, sources, base) {
  const src = new URL('src', base).pathname;
  let seen = 0;
  for (const dir of sources) {
    for (const { path, st } of sourceFiles(`${src}/${dir}`)) {
      const rec = stamp[path.slice(src.length + 1)];
      if (!rec) return false;
      seen++;
      if (rec[0] === st.size && rec[1] === st.mtimeMs && rec[2] === st.ctimeMs) continue;
      if (rec[0] !== st.size || rec[3] !== sha1(path)) return false;
    }
  }
  // A file the build had that is gone (the same count of present ones said they all were there).
  const recorded = Object.keys(stamp).filter((p) => sources.some((dir) => p.startsWith(`${dir}/`))).length;
  return recorded === seen;
}

/** The stamp `npm run build` left, or undefined (none, or not readable as one). */
function readStamp(base) {
  try {
    const s = JSON.parse(readFileSync(new URL(STAMP, base), 'utf8'));
    return s && typeof s.files === 'object' ? s.files : undefined;
  } catch {
    return undefined;
  }
}

/**
 * @param {string} main the module below src/ without its extension, e.g. `feos/main`
 * @param {readonly string[]} sources the folders below src/ whose files count (one added, removed or changed since the build)
 * @param {URL} [base] the tree's root (this one's by default)
 * @returns {{ entry: URL, stale: boolean }} what to import, and whether a dist/ was passed over as not built from these sources
 */
export function freshEntry(main, sources = FEOS_SOURCES, base = root) {
  const built = new URL(`dist/src/${main}.js`, base);
  const source = new URL(`src/${main}.ts`, base);
  if (!existsSync(built)) return { entry: source, stale: false };
  const stamp = readStamp(base);
  const stale = !stamp || !sameSources(stamp, sources, base);
  return { entry: stale ? source : built, stale };
}

/** Writes `data` to `path` whole: a temporary file beside it, fsync, rename. */
function writeWhole(path, data) {
  const tmp = `${path}.${process.pid}.tmp`;
  const fd = openSync(tmp, 'w', 0o644);
  try {
    writeSync(fd, data);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
}

/**
 * The build's steps (package.json's `build`): `prepare` before tsc removes the stamp (a build that fails
 * leaves none: the sources run) and records the sources as tsc is about to read them; `commit` after it
 * puts that record in place.
 * @param {'prepare' | 'commit'} step
 * @param {URL} [base] the tree's root
 * @throws Error on another step, or `commit` without a `prepare`
 */
export function buildStamp(step, base = root) {
  const stamp = new URL(STAMP, base).pathname;
  const next = new URL(NEXT, base).pathname;
  if (step === 'prepare') {
    rmSync(stamp, { force: true });
    statSync(new URL('dist', base)); // made by the caller (mkdir -p dist)
    writeWhole(next, `${JSON.stringify({ files: stampOf(base) })}\n`);
  } else if (step === 'commit') {
    if (!existsSync(next)) throw new Error(`${NEXT} is missing: run \`node bin/fresh-entry.js prepare\` before tsc`);
    renameSync(next, stamp);
  } else throw new Error(`fresh-entry: unknown step ${JSON.stringify(step)} (prepare or commit)`);
}

if (process.argv[1] && new URL(import.meta.url).pathname === process.argv[1]) buildStamp(process.argv[2]);
