#!/usr/bin/env node
// Thin executable: runs the built feosd when `npm run build` has made it and it is not older than the
// sources, else the TypeScript sources directly (Node.js 24 strips types). A dist/ older than a source
// of FeOS's (a `git pull` without a build) would run the code before the pull, beside a guest built
// from the new sources.
import { existsSync, readdirSync, statSync } from 'node:fs';
const root = new URL('../', import.meta.url);
const built = new URL('dist/src/feos/main.js', root);
/** Whether a .ts or .js file under `dir` was changed after `ms`. */
const changedAfter = (dir, ms) =>
  existsSync(dir) && readdirSync(dir, { withFileTypes: true, recursive: true }).some((e) => e.isFile() && /\.[jt]s$/.test(e.name) && statSync(`${e.parentPath}/${e.name}`).mtimeMs > ms);
let entry = new URL('src/feos/main.ts', root);
if (existsSync(built)) {
  const at = statSync(built).mtimeMs;
  if (changedAfter(new URL('src/feos', root).pathname, at) || changedAfter(new URL('src/lib', root).pathname, at)) {
    process.stderr.write('feosd: dist/ is older than src/ (run npm run build); running the sources\n');
  } else entry = built;
}
const { main } = await import(entry.href);
await main(process.argv);
