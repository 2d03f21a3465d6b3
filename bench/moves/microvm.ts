/**
 * The microVM case of the moves benchmark (issue 18, "Done when"): a microVM pod's Move between two FeOS
 * nodes, freeze-to-Running as the control plane reports it (the `Moved` event: from the hibernation's start
 * to the replacement seen Running), set against the node-level cost of the same thing alone in the same
 * run: HibernatePod of a pod of the same size and image on one node, then RestorePod of it on the other,
 * each called straight through the node connections (feosctl --node), the control plane out of the path.
 * The ratio is what the control plane adds (the Checkpoint's phases, the one-write replacement, the FeOS
 * kubelet's watch and calls, the status). Goal: under 1.5x.
 *
 * As root: `kube32-cli up --workers 0 --feos-nodes 2` (real feosds in network namespaces, real QEMU; TCG
 * unless `BENCH_FEOS_ACCEL=kvm`), a local registry with examples/feos-counter's image, 256 MiB pods.
 * `BENCH_MICROVM_MOVES` moves and node-level rounds each (2 by default; a TCG boot is a minute or two).
 * Prints figures and the ratio; asserts nothing about time. Run: `node bench/moves/microvm.ts`, or as the
 * last part of `node bench/moves/index.ts` (as root; `BENCH_MICROVM=0` skips it).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startRegistry } from '../../test/feos/registry.ts';
import { CLI, feosctlNode, kubectl, run, startUp, until } from '../../test/root/fleet/helpers.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const ROUNDS = Number(process.env.BENCH_MICROVM_MOVES ?? 2);

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

/** Runs the microVM case and prints its lines. @throws Error when a step fails (the cluster is stopped first) */
export async function benchMicrovmMoves(): Promise<void> {
  if (process.getuid?.() !== 0) {
    console.log('microvm: skipped (needs root: FeOS nodes in network namespaces, QEMU)');
    return;
  }
  const afters: Array<() => Promise<void> | void> = [];
  const t = { after: (fn: () => Promise<void> | void) => void afters.push(fn) };
  const dir = mkdtempSync('/tmp/k32-bench-vm-');
  try {
    const reg = await startRegistry(dir, 'bench-unused-token');
    afters.push(() => reg.stop());
    execFileSync('bash', [join(ROOT, 'examples/feos-counter/build-image.sh'), reg.direct], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 300_000 });
    const up = await startUp(t, ['--workers', '0', '--feos-nodes', '2', '--feos-accel', process.env.BENCH_FEOS_ACCEL ?? 'tcg', '--feos-registry', reg.direct, '--ready-timeout', '300'], 1_200_000);
    const k = (...args: string[]) => kubectl(up.kubeconfig, ...args);
    const yaml = join(dir, 'feos-counter.yaml');
    writeFileSync(yaml, execFileSync('sed', [`s|127.0.0.1:5000|${reg.direct}|`, join(ROOT, 'examples/feos-counter/counter.yaml')], { encoding: 'utf8' }));
    const applied = await k('apply', '-f', yaml);
    if (applied.code !== 0) throw new Error(applied.stderr);
    const podOf = async () => {
      const r = await k('get', 'pods', '-l', 'app=feos-counter', '-o', 'jsonpath={range .items[?(@.status.phase=="Running")]}{.metadata.name} {.spec.nodeName} {.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}');
      const [name, node, ready] = r.stdout.trim().split(' ');
      return name && ready === 'True' ? { name, node: node! } : undefined;
    };
    let pod = await until('the microVM pod Running and Ready', podOf, 900_000);

    // The moves through the control plane.
    const reported: number[] = [];
    const observed: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const to = pod.node === 'feos-1' ? 'feos-2' : 'feos-1';
      const t0 = performance.now();
      const r = await run(process.execPath, [CLI, 'move', pod.name, '--to', to, '--timeout', '10m', '--kubeconfig', up.kubeconfig], 700_000);
      if (r.code !== 0) throw new Error(`move ${i}: ${r.stderr}${r.stdout}`);
      pod = await until(`the pod Running and Ready on ${to}`, async () => {
        const p = await podOf();
        return p && p.node === to ? p : undefined;
      }, 300_000);
      observed.push(performance.now() - t0);
      const ev = await k('get', 'events', '--field-selector', `involvedObject.name=${pod.name},reason=Moved`, '-o', 'jsonpath={range .items[*]}{.message}{"\\n"}{end}');
      const all = [...ev.stdout.matchAll(/in (\d+) ms from the freeze to Running/g)].map((m) => Number(m[1]));
      if (all.length > reported.length) reported.push(all[all.length - 1]!);
    }

    // The node-level cost alone: a FeOS pod of the same size and image made with feosctl (no cluster
    // metadata: the FeOS kubelet never touches it), hibernated on one node and restored on the other.
    const created = await run(process.execPath, [join(ROOT, 'bin/feosctl.js'), '--kubeconfig', up.kubeconfig, '--node', 'feos-1', '--timeout', '900', 'pod', 'create', '--memory', '256Mi', '--network', '--image', `${reg.direct}/feos-counter:1`, '--wait', '-o', 'json'], 1_000_000);
    if (created.code !== 0) throw new Error(`feosctl pod create: ${created.stderr}`);
    const id = (JSON.parse(created.stdout) as { id: string }).id;
    const bare: number[] = [];
    let at = 'feos-1';
    for (let i = 0; i < ROUNDS; i++) {
      const to = at === 'feos-1' ? 'feos-2' : 'feos-1';
      const t0 = performance.now();
      const h = await run(process.execPath, [join(ROOT, 'bin/feosctl.js'), '--kubeconfig', up.kubeconfig, '--node', at, '--timeout', '600', 'pod', 'hibernate', id, '-o', 'json'], 700_000);
      if (h.code !== 0) throw new Error(`hibernate on ${at}: ${h.stderr}`);
      const checkpoint = (JSON.parse(h.stdout) as { checkpoint: string }).checkpoint;
      const r = await run(process.execPath, [join(ROOT, 'bin/feosctl.js'), '--kubeconfig', up.kubeconfig, '--node', to, '--timeout', '600', 'pod', 'restore', id, '--checkpoint', checkpoint, '-o', 'json'], 700_000);
      if (r.code !== 0) throw new Error(`restore on ${to}: ${r.stderr}`);
      bare.push(performance.now() - t0);
      // The source's HIBERNATED record goes (its checkpoint was claimed by the restore).
      await feosctlNode(up.kubeconfig, at, 'pod', 'delete', id);
      at = to;
    }
    await feosctlNode(up.kubeconfig, at, 'pod', 'delete', id);

    const m = median(reported);
    const b = median(bare);
    console.log('\nmicrovm (256 MiB pod, busybox counter; FeOS nodes under', process.env.BENCH_FEOS_ACCEL ?? 'tcg', `; ${ROUNDS} of each, medians)`);
    console.log(`  move, freeze to Running (Moved event)      ${m.toFixed(0).padStart(8)} ms   [${reported.join(', ')}]`);
    console.log(`  move, kube32-cli move to Running seen     ${median(observed).toFixed(0).padStart(8)} ms`);
    console.log(`  node-level hibernate + restore alone       ${b.toFixed(0).padStart(8)} ms   [${bare.map((x) => x.toFixed(0)).join(', ')}]`);
    console.log(`  ratio (control plane adds; goal < 1.5x)    ${(m / b).toFixed(2).padStart(8)}x`);
    const stopped = await up.stop();
    if (stopped !== 0) console.log(`microvm: up's stop exited ${stopped}`);
  } finally {
    for (const fn of afters.reverse()) await Promise.resolve(fn()).catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) await benchMicrovmMoves();
