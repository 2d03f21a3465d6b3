// The entry point of the thin executables (bin/*.js): the built module when `npm run build` has made it and
// it is not older than the sources it is built from, else the TypeScript source (Node.js 24 strips types).
// A dist/ older than a source (a `git pull` or an edit without a build) would run the code before it: feosd
// beside a guest built from the new sources, kube32-sim and kube32-cli without the fix just pulled.
import { existsSync, readdirSync, statSync } from 'node:fs';

const root = new URL('../', import.meta.url);

/** Whether a .ts or .js file under `dir` was changed after `ms`. */
const changedAfter = (dir, ms) =>
  existsSync(dir) && readdirSync(dir, { withFileTypes: true, recursive: true }).some((e) => e.isFile() && /\.[jt]s$/.test(e.name) && statSync(`${e.parentPath}/${e.name}`).mtimeMs > ms);

/** The folders of src/ that FeOS's executables are built from. */
export const FEOS_SOURCES = ['feos', 'lib'];
/** The folders of src/ that Kube32's executables (kube32-cli, kube32-sim) are built from: all but FeOS's own. */
export const KUBE32_SOURCES = ['apiserver', 'cli', 'controllers', 'k32s', 'kubelet', 'lib', 'wasm'];

/**
 * @param {string} main the module below src/ without its extension, e.g. `feos/main`
 * @param {readonly string[]} sources the folders below src/ whose files count (a .ts or .js newer than the build)
 * @returns {{ entry: URL, stale: boolean }} what to import, and whether a dist/ was passed over as older than a source
 */
export function freshEntry(main, sources = FEOS_SOURCES) {
  const built = new URL(`dist/src/${main}.js`, root);
  const source = new URL(`src/${main}.ts`, root);
  if (!existsSync(built)) return { entry: source, stale: false };
  const at = statSync(built).mtimeMs;
  const stale = sources.some((dir) => changedAfter(new URL(`src/${dir}`, root).pathname, at));
  return { entry: stale ? source : built, stale };
}
