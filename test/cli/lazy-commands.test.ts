/**
 * `dev`, `snapshot inspect` and `control-plane` load their code only when they run (their flags and
 * help are in src/cli/commands/, their code in src/cli/actions/). Each case runs the real CLI with the
 * module-load tracer (trace-imports.ts) and checks what it loaded, that the help still lists every
 * flag, and that a refused flag still gets its message and exit code once the code is loaded.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { CLI, run } from '../e2e/cluster.ts';

const TRACER = fileURLToPath(new URL('./trace-imports.ts', import.meta.url));

/** A temporary directory removed after the test. */
function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'kube32-lazy-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Runs the CLI and answers its output and the URLs of the modules it loaded. */
async function traced(t: TestContext, args: string[]) {
  const trace = join(tempDir(t), 'trace.txt');
  const r = await run(process.execPath, ['--import', TRACER, CLI, ...args], {
    env: { ...process.env, KUBE32_TRACE_IMPORTS: trace },
    timeoutMs: 30_000,
  });
  const loaded = readFileSync(trace, 'utf8').split('\n').filter(Boolean);
  return { ...r, loaded };
}

/** Modules that the help of these three commands must not load. */
const HEAVY = [
  /@kubernetes\/client-node/,
  /\/src\/apiserver\//,
  /\/src\/controllers\//,
  /\/src\/wasm\//,
  /\/src\/k32s\//,
  /\/node_modules\/yaml\//,
  /\/src\/cli\/actions\//,
];

test('help of dev, snapshot inspect, apiserver and control-plane lists every flag and loads none of their code', { timeout: 90_000 }, async (t) => {
  const cases: [string[], string[]][] = [
    [
      ['dev', '--help'],
      ['--port', '--address', '--env', '--tick-interval', '--topics', '--memory-limit', '--restore', '--save-on-exit', '--fs-dir', '--fs-limit', '--name', '--freeze-timeout'],
    ],
    [['snapshot', 'inspect', '--help'], ['--output', '<file>']],
    [['apiserver', '--help'], ['--data-dir', '--port', '--bind', '--storage', '--etcd-endpoints', '--insecure-http', '--checkpoint-data-bytes', '--issue-node-kubeconfig', '--out']],
    [
      ['control-plane', '--help'],
      ['--data-dir', '--storage', '--etcd-endpoints', '--port', '--bind', '--checkpoint-data-bytes', '--node-monitor-grace-period', '--pod-eviction-timeout', '--move-timeout', '--checkpoint-retention', '--cert-san', '--leader-elect', '--leader-elect-identity', '--listen-file'],
    ],
  ];
  for (const [args, flags] of cases) {
    const r = await traced(t, args);
    assert.equal(r.code, 0, r.stderr);
    for (const flag of flags) assert.ok(r.stdout.includes(flag), `${args.join(' ')} lists ${flag}:\n${r.stdout}`);
    for (const heavy of HEAVY) {
      assert.ok(!r.loaded.some((u) => heavy.test(u)), `${args.join(' ')} loaded ${r.loaded.find((u) => heavy.test(u))}`);
    }
  }
});

test('the top-level help loads none of the commands\' code (Kubernetes client, API server, controllers, runtime)', { timeout: 60_000 }, async (t) => {
  const r = await traced(t, ['--help']);
  assert.equal(r.code, 0, r.stderr);
  for (const command of ['snapshot', 'dev', 'apiserver', 'control-plane']) assert.match(r.stdout, new RegExp(`^  ${command} `, 'm'));
  for (const heavy of HEAVY) {
    assert.ok(!r.loaded.some((u) => heavy.test(u)), `--help loaded ${r.loaded.find((u) => heavy.test(u))}`);
  }
});

test('a refused flag still ends each command with its message and exit code 1', { timeout: 90_000 }, async (t) => {
  const dir = tempDir(t);
  const cases: [string[], RegExp][] = [
    [['dev', join(dir, 'pod.wasm'), '--port', '70000'], /^error: --port must be 0 to 65535: got "70000"\n$/],
    [['dev', join(dir, 'absent.wasm')], /^error: .*absent\.wasm: cannot read it: no such file\n$/],
    [['snapshot', 'inspect', join(dir, 'absent.k32s'), '-o', 'table'], /^error: unable to match a printer suitable for the output format "table", allowed formats are: json,yaml\n$/],
    [['snapshot', 'inspect', join(dir, 'absent.k32s')], /^error: .*absent\.k32s: no such file\n$/],
    [['control-plane', '--data-dir', dir, '--port', '99999'], /^error: --port must be a TCP port \(0-65535\): current value is "99999"\n$/],
    // An empty port was 0 (Number('')): the control plane listened on a port picked at random.
    [['control-plane', '--data-dir', dir, '--port', ''], /^error: --port must be a TCP port \(0-65535\): current value is ""\n$/],
    [['apiserver', '--data-dir', dir, '--port', ' '], /^error: --port must be a TCP port \(0-65535\): current value is " "\n$/],
    [['dev', join(dir, 'pod.wasm'), '--port', ''], /^error: --port must be 0 to 65535: got ""\n$/],
    [['control-plane', '--data-dir', dir, '--port', '0', '--move-timeout', '0s'], /^error: --move-timeout: must be positive\n$/],
  ];
  for (const [args, message] of cases) {
    const r = await run(process.execPath, [CLI, ...args], { timeoutMs: 30_000 });
    assert.equal(r.code, 1, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message, args.join(' '));
    assert.equal(r.stdout, '', args.join(' '));
  }
});
