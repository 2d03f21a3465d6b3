/** Files of the kube32 package itself, found from this module whether it runs from `src/` or `dist/src/`. */
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

let root: string | undefined;

/**
 * The package's root directory: the nearest directory above this module with `bin/kube32-cli.js`.
 * @throws Error when there is none (a broken install)
 */
export function packageRoot(): string {
  if (root) return root;
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'bin', 'kube32-cli.js'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error(`kube32: cannot find bin/kube32-cli.js above ${fileURLToPath(import.meta.url)}`);
    dir = up;
  }
  root = dir;
  return dir;
}

/** The absolute path of `rel` inside the package, e.g. `repoFile('bin/kube32-sim.js')`. */
export function repoFile(rel: string): string {
  return join(packageRoot(), rel);
}

/** The data dir `up` uses without `--data-dir`: `$KUBE32_DATA_DIR`, else `~/.kube32` (beside kubectl's `~/.kube`). */
export function defaultDataDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.KUBE32_DATA_DIR || join(env.HOME || homedir(), '.kube32');
}
