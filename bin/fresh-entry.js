// The entry point of FeOS's thin executables (bin/feosd.js, bin/feosctl.js): the built module when
// `npm run build` has made it and it is not older than the sources, else the TypeScript source
// (Node.js 24 strips types). A dist/ older than a source of FeOS's (a `git pull` without a build)
// would run the code before the pull, beside a guest built from the new sources.
import { existsSync, readdirSync, statSync } from 'node:fs';

const root = new URL('../', import.meta.url);

/** Whether a .ts or .js file under `dir` was changed after `ms`. */
const changedAfter = (dir, ms) =>
  existsSync(dir) && readdirSync(dir, { withFileTypes: true, recursive: true }).some((e) => e.isFile() && /\.[jt]s$/.test(e.name) && statSync(`${e.parentPath}/${e.name}`).mtimeMs > ms);

/**
 * @param {string} main the module below src/ without its extension, e.g. `feos/main`
 * @returns {{ entry: URL, stale: boolean }} what to import, and whether a dist/ was passed over as older than src/feos or src/lib
 */
export function freshEntry(main) {
  const built = new URL(`dist/src/${main}.js`, root);
  const source = new URL(`src/${main}.ts`, root);
  if (!existsSync(built)) return { entry: source, stale: false };
  const at = statSync(built).mtimeMs;
  const stale = changedAfter(new URL('src/feos', root).pathname, at) || changedAfter(new URL('src/lib', root).pathname, at);
  return { entry: stale ? source : built, stale };
}
