/**
 * Part 2 of bench/runtime (issue 3, "Performance"): freeze + snapshot + restore of a pod against a
 * plain copy plus SHA-256 of the same memory (target: within 2× for 1 MiB and more).
 *
 * Like with like, in one run, under whatever load the machine has:
 * - each repetition measures the baseline and every variant back to back, and the ratio is taken per
 *   repetition (then the median), so a burst of load hits both sides of a ratio alike;
 * - nothing runs in the background while a repetition is timed: the spare pod thread the runtime
 *   boots after each start is awaited first (a node that runs a while has one booted);
 * - the snapshot is taken as the kubelet's `POST /checkpoint` takes it, with `digest: true` (the
 *   `X-Kube32-Snapshot-Sha256` header goes before the body);
 * - two shapes of a move: "sequential" reads the whole snapshot, then restores it (a checkpoint saved,
 *   then restored elsewhere); "streamed" restores straight from the snapshot's chunks as they come
 *   (what a move that pipes the bytes costs; the two pod threads work at the same time), with the
 *   digest pass first and without it ("no digest", as `kube32-cli dev --save-on-exit` snapshots);
 * - the phases are shown apart: the freeze, `snapshot()` (its digest pass), reading the chunks, the
 *   restore (handing the snapshot to a booted thread, instantiating, writing the state back), and a
 *   fresh start of the same module for comparison (the part of a restore any start pays).
 *
 * Run alone: node --expose-gc bench/runtime/snapshots.ts [[LABEL=]OTHER/src/wasm/index.ts ...]
 * Other runtimes (an older commit's src/, copied out with `git archive HEAD~3 src | tar -x -C /tmp/old`)
 * run in the same process, repetition by repetition with this one, for before/after figures that
 * the machine's load affects alike; the last line of each size compares them.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as Runtime from '../../src/wasm/index.ts';

const gc = (globalThis as { gc?: () => void }).gc ?? (() => {});

function wat(text: string): Uint8Array {
  const dir = mkdtempSync(join(tmpdir(), 'k32-bench-'));
  try {
    writeFileSync(join(dir, 'm.wat'), text);
    execFileSync('wat2wasm', [join(dir, 'm.wat'), '-o', join(dir, 'm.wasm')]);
    return readFileSync(join(dir, 'm.wasm'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A pod whose k32_init fills `pages` pages of memory with pseudo-random bytes. */
function filler(pages: number): Uint8Array {
  return wat(`(module (memory (export "memory") ${pages})
    (func (export "k32_init") (local $i i32) (local $x i32)
      (local.set $x (i32.const 1))
      (loop $l
        (local.set $x (i32.add (i32.mul (local.get $x) (i32.const 1103515245)) (i32.const 12345)))
        (i32.store (local.get $i) (local.get $x))
        (br_if $l (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 4))) (i32.const ${pages * 65536})))))
    (func (export "k32_tick")))`);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/** Milliseconds of one repetition, by phase. */
interface Rep {
  base: number;
  freeze: number;
  info: number;
  read: number;
  restore: number;
  sequential: number;
  streamed: number;
  streamedPlain: number;
  fresh: number;
}

async function drain(chunks: AsyncIterable<Uint8Array>): Promise<Uint8Array[]> {
  const out: Uint8Array[] = [];
  for await (const c of chunks) out.push(c);
  return out;
}

/** One repetition of every variant with runtime `rt` (module `mod`, baseline over `data`). */
async function repetition(rt: typeof Runtime, mod: Runtime.PodModule, data: Uint8Array): Promise<Rep> {
  const { PodInstance, warmWorkerPool } = rt;
  const names = { namespace: 'bench', containerName: 'fill' };
  await warmWorkerPool();
  const pod = await PodInstance.start({ ...names, module: mod, podName: 'fill' });
  await warmWorkerPool(); // the spare booted after that start is ready: nothing boots while timed
  gc();
  let t = performance.now();
  createHash('sha256').update(new Uint8Array(data)).digest();
  const base = performance.now() - t;

  // Sequential: freeze, snapshot, read it all, then restore it on a booted thread.
  gc();
  t = performance.now();
  await pod.freeze();
  const t1 = performance.now();
  const snap = await pod.snapshot({ digest: true });
  const t2 = performance.now();
  const chunks = await drain(snap.chunks);
  const t3 = performance.now();
  const restored = await PodInstance.start({ ...names, module: mod, podName: 'seq', restoreFrom: chunks.values() as unknown as AsyncIterable<Uint8Array> });
  const t4 = performance.now();
  await restored.terminate();
  await pod.thaw();
  await warmWorkerPool();

  // Streamed: the restore reads the snapshot's chunks as the source pod's thread writes them
  // (with the digest first, as the kubelet, and without, as kube32-cli dev).
  const streamed = async (digest: boolean): Promise<number> => {
    gc();
    const s0 = performance.now();
    await pod.freeze();
    const live = await pod.snapshot({ digest });
    const piped = await PodInstance.start({ ...names, module: mod, podName: 'piped', restoreFrom: live.chunks });
    const s1 = performance.now();
    await piped.terminate();
    await pod.thaw();
    await warmWorkerPool();
    return s1 - s0;
  };
  const streamedDigest = await streamed(true);
  const streamedPlain = await streamed(false);

  // A fresh start of the same module: what any start costs (attach to a booted thread, instantiate, k32_init).
  gc();
  const f0 = performance.now();
  const fresh = await PodInstance.start({ ...names, module: mod, podName: 'fresh' });
  const f1 = performance.now();
  await Promise.all([pod.terminate(), fresh.terminate()]);
  return { base, freeze: t1 - t, info: t2 - t1, read: t3 - t2, restore: t4 - t3, sequential: t4 - t, streamed: streamedDigest, streamedPlain, fresh: f1 - f0 };
}

/**
 * Runs the snapshot benchmark and prints its table. With several runtimes (before and after a
 * change), each repetition runs them one after the other, and a line compares them repetition by
 * repetition (the median of each repetition's ratio of totals to the first runtime's).
 * @param runtimes the runtime modules by label (src/wasm/index.ts, or other copies of it)
 */
export async function benchSnapshots(runtimes: Array<[label: string, rt: typeof Runtime]>): Promise<void> {
  console.log('\n2. freeze + snapshot (digest: true, as the kubelet) + restore, against copy + SHA-256 of the same bytes');
  console.log('   medians of interleaved repetitions, in ms; ratios are medians of each repetition\'s own ratio');
  const wide = Math.max(...runtimes.map(([l]) => l.length), 6);
  console.log(`   memory  ${'runtime'.padEnd(wide)} reps  copy+hash  freeze  snapshot()  read chunks  restore  fresh start | sequential  ratio | streamed  ratio | no digest  ratio | (seq - fresh) ratio`);
  for (const [label, pages, reps] of [['64 KiB', 1, 15], ['1 MiB', 16, 15], ['16 MiB', 256, 11]] as const) {
    const bytes = filler(pages);
    const mods = await Promise.all(runtimes.map(([, rt]) => rt.loadModule(bytes, { memoryLimitBytes: pages * 65536 })));
    const data = new Uint8Array(pages * 65536);
    for (let i = 0; i < data.length; i += 4) data[i] = (i * 2654435761) >>> 24;
    const runs: Rep[][] = runtimes.map(() => []);
    for (let r = 0; r < reps + 1; r++) {
      for (let k = 0; k < runtimes.length; k++) {
        // Alternate the order, so that neither runtime always follows the other.
        const i = r % 2 === 0 ? k : runtimes.length - 1 - k;
        const rep = await repetition(runtimes[i]![1], mods[i]!, data);
        // The first repetition warms the code paths (and the module cache) and is not counted.
        if (r > 0) runs[i]!.push(rep);
      }
    }
    const f = (n: number, w: number): string => n.toFixed(n < 10 ? 2 : 1).padStart(w);
    runtimes.forEach(([name], i) => {
      const rs = runs[i]!;
      const m = (k: keyof Rep): number => median(rs.map((x) => x[k]));
      const ratio = (g: (x: Rep) => number): number => median(rs.map((x) => g(x) / x.base));
      console.log(`   ${label.padEnd(7)} ${name.padEnd(wide)} ${String(reps).padStart(4)} ${f(m('base'), 10)} ${f(m('freeze'), 7)} ${f(m('info'), 11)} ${f(m('read'), 12)} ${f(m('restore'), 8)} ${f(m('fresh'), 12)} | ${f(m('sequential'), 10)} ${f(ratio((x) => x.sequential), 5)}x | ${f(m('streamed'), 8)} ${f(ratio((x) => x.streamed), 5)}x | ${f(m('streamedPlain'), 9)} ${f(ratio((x) => x.streamedPlain), 5)}x | ${f(ratio((x) => x.sequential - x.fresh), 8)}x`);
    });
    for (let i = 1; i < runtimes.length; i++) {
      const vs = (k: keyof Rep): string => median(runs[i]!.map((x, j) => x[k] / runs[0]![j]![k])).toFixed(2);
      console.log(`   ${label.padEnd(7)} ${runtimes[i]![0]} / ${runtimes[0]![0]}, repetition by repetition: sequential ${vs('sequential')}x, streamed ${vs('streamed')}x, no digest ${vs('streamedPlain')}x, restore ${vs('restore')}x`);
    }
  }
  console.log('   sequential = freeze + snapshot() + read chunks + restore; streamed = the restore reads the chunks as they are written;');
  console.log('   no digest = streamed with snapshot() (no digest pass first, as kube32-cli dev); (seq - fresh) = sequential less a fresh start');
  console.log('   (restore includes handing the snapshot to a booted spare thread and instantiating the module; "fresh start" is that alone)');
}

if (import.meta.url === pathToFileURL(process.argv[1]!).href) {
  const own = new URL('../../src/wasm/index.ts', import.meta.url).pathname;
  // Each argument is PATH or LABEL=PATH.
  const others = process.argv.slice(2).map((a, i): [string, string] => (a.includes('=') ? [a.slice(0, a.indexOf('=')), resolve(a.slice(a.indexOf('=') + 1))] : [`r${i}`, resolve(a)]));
  const runtimes: Array<[string, typeof Runtime]> = [];
  for (const [label, path] of [...others, ['this', own] as [string, string]]) {
    console.log(`runtime ${label}: ${path}`);
    runtimes.push([label, (await import(pathToFileURL(path).href)) as typeof Runtime]);
  }
  console.log(`load average ${loadavg()[0]!.toFixed(1)} on ${availableParallelism()} cores`);
  await benchSnapshots(runtimes);
  process.exit(0);
}
