/**
 * kube32-cli starts fast: a command loads only its own code, and only when it runs. Each case runs the
 * real CLI with a module-load tracer (trace-imports.ts) and checks what it loaded, and that the help
 * still lists every command and every flag of each.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { CLI, run } from '../e2e/cluster.ts';

const TRACER = fileURLToPath(new URL('./trace-imports.ts', import.meta.url));

/** Runs the CLI and answers its output and the modules it loaded. */
async function traced(t: TestContext, args: string[]) {
  const dir = mkdtempSync(join(tmpdir(), 'kube32-startup-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const trace = join(dir, 'trace.txt');
  const r = await run(process.execPath, ['--import', TRACER, CLI, ...args], {
    env: { ...process.env, KUBE32_TRACE_IMPORTS: trace },
    timeoutMs: 30_000,
  });
  const loaded = readFileSync(trace, 'utf8').split('\n').filter(Boolean);
  return { ...r, loaded };
}

/** What a command that does not talk to a cluster, or has not started yet, must not load. */
const HEAVY = [/@kubernetes\/client-node/, /\/src\/apiserver\//, /\/src\/controllers\//, /\/src\/wasm\//, /\/src\/cli\/local-cluster\.ts/];

test('help of push, move, checkpoint and up, and a refused flag, load neither the Kubernetes client nor the control plane', { timeout: 120_000 }, async (t) => {
  const flags: Record<string, string[]> = {
    push: ['--name', '--kubeconfig', '--context', '--output'],
    move: ['--to', '--container', '--timeout', '--no-wait', '--kubeconfig', '--context', '--namespace', '--output'],
    checkpoint: ['--container', '--name', '--timeout', '--no-wait', '--kubeconfig', '--namespace', '--output'],
    up: ['--workers', '--data-dir', '--port', '--first-address', '--worker-heap', '--node-monitor-grace-period', '--pod-eviction-timeout', '--ready-timeout'],
  };
  for (const [command, expected] of Object.entries(flags)) {
    const r = await traced(t, [command, '--help']);
    assert.equal(r.code, 0, r.stderr);
    for (const flag of expected) assert.ok(r.stdout.includes(flag), `${command} --help lists ${flag}:\n${r.stdout}`);
    for (const heavy of HEAVY) {
      assert.ok(!r.loaded.some((u) => heavy.test(u)), `${command} --help loaded ${r.loaded.find((u) => heavy.test(u))}`);
    }
  }
  const bad = await traced(t, ['up', '--workers', 'two']);
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /invalid value "two" for --workers/);
  assert.ok(!bad.loaded.some((u) => HEAVY[0]!.test(u) || HEAVY[1]!.test(u)), 'a refused flag loads no client and no API server');
});

test('the top-level help lists every command; help COMMAND and a misspelt command still work', { timeout: 60_000 }, async (t) => {
  const r = await traced(t, ['--help']);
  assert.equal(r.code, 0, r.stderr);
  for (const command of ['snapshot', 'dev', 'apiserver', 'control-plane', 'up', 'push', 'move', 'checkpoint']) {
    assert.match(r.stdout, new RegExp(`^  ${command} `, 'm'), `--help lists ${command}`);
  }
  const help = await traced(t, ['help', 'move']);
  assert.equal(help.code, 0, help.stderr);
  assert.match(help.stdout, /Usage: kube32-cli move \[options\] <pod>/);
  const typo = await traced(t, ['pussh']);
  assert.equal(typo.code, 1);
  assert.match(typo.stderr, /unknown command 'pussh'\n\(Did you mean push\?\)/);
});
