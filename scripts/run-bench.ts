// Runs the benchmarks in bench/ (each prints ratios measured in one run).
//   node scripts/run-bench.ts            every bench/*/index.ts (or bench/*.ts)
//   node scripts/run-bench.ts k32s ...   just those
import { spawnSync } from 'node:child_process';
import { globSync, existsSync } from 'node:fs';

const named = process.argv.slice(2);
const all = globSync('bench/*/index.ts').map((f) => f.split('/')[1]!);
const which = named.length > 0 ? named : all.sort();
let failed = 0;
for (const name of which) {
  const file = existsSync(`bench/${name}/index.ts`) ? `bench/${name}/index.ts` : `bench/${name}.ts`;
  console.log(`\n== bench ${name}`);
  const r = spawnSync(process.execPath, ['--expose-gc', file], { stdio: 'inherit' });
  if (r.status !== 0) failed++;
}
process.exit(failed > 0 ? 1 : 0);
