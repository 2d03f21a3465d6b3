// Runs the test suites with node:test, straight from the TypeScript sources (Node 24 strips types).
//   node scripts/run-tests.ts            every suite that needs no root and no VM (`npm test`)
//   node scripts/run-tests.ts --root     the suites under test/root/ (root, network namespaces, QEMU)
//   node scripts/run-tests.ts FILE...    just those files
import { spawnSync } from 'node:child_process';
import { globSync } from 'node:fs';

const args = process.argv.slice(2);
const root = args.includes('--root');
const named = args.filter((a) => !a.startsWith('--'));
let files: string[];
if (named.length > 0) {
  files = named;
} else if (root) {
  if (process.getuid?.() !== 0) {
    console.error('run-tests: the root suites need root (they create network namespaces and start QEMU)');
    process.exit(2);
  }
  files = globSync('test/root/**/*.test.ts');
} else {
  files = [...globSync('src/**/*.test.ts'), ...globSync('test/**/*.test.ts')].filter((f) => !f.startsWith('test/root/'));
}
files.sort();
if (files.length === 0) {
  console.error('run-tests: no test files found');
  process.exit(1);
}
const result = spawnSync(
  process.execPath,
  ['--test', '--test-concurrency=2', '--test-timeout=600000', '--test-reporter=spec', ...files],
  { stdio: 'inherit' },
);
process.exit(result.status ?? 1);
