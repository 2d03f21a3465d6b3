/**
 * Reads a V8 CPU profile (`node --cpu-prof`, e.g. from `bench/control-plane --cpu-prof DIR`) and prints
 * where the time went: the functions with the most self time, and the project's functions with the
 * most total time (self plus callees), each as a share of the profile.
 *
 *   node bench/control-plane/profile-summary.ts FILE.cpuprofile [--top 30]
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const { values, positionals } = parseArgs({ allowPositionals: true, options: { top: { type: 'string', default: '30' } } });
if (positionals.length !== 1) throw new RangeError('usage: profile-summary.ts FILE.cpuprofile [--top N]');
const top = Number(values.top);
const profile = JSON.parse(readFileSync(positionals[0]!, 'utf8')) as Profile;

const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const selfUs = new Map<number, number>();
for (const [i, id] of profile.samples.entries()) selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
const totalUs = [...selfUs.values()].reduce((a, b) => a + b, 0);

const label = (n: ProfileNode) => {
  const f = n.callFrame;
  const file = f.url.replace(/^file:\/\//, '').replace(/.*\/(src|node_modules|bench)\//, '$1/');
  return `${f.functionName || '(anonymous)'} ${file ? `${file}:${f.lineNumber + 1}` : ''}`.trim();
};

const self = new Map<string, number>();
const total = new Map<string, number>();
for (const [id, us] of selfUs) {
  const n = byId.get(id)!;
  self.set(label(n), (self.get(label(n)) ?? 0) + us);
  // Total time: once per distinct frame on the stack.
  const seen = new Set<string>();
  for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
    const l = label(byId.get(cur)!);
    if (seen.has(l)) continue;
    seen.add(l);
    total.set(l, (total.get(l) ?? 0) + us);
  }
}
const pctOf = (us: number) => `${((100 * us) / totalUs).toFixed(1).padStart(5)} %`;
console.log(`profile: ${(totalUs / 1e6).toFixed(1)} s sampled\n\nself time:`);
for (const [l, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${pctOf(us)}  ${l}`);
console.log('\ntotal time, src/ functions:');
for (const [l, us] of [...total].filter(([l]) => l.includes('src/')).sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${pctOf(us)}  ${l}`);
