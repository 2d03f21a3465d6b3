/**
 * The runtime's suites again, with dense pods: every suite that starts pods runs in a child
 * `node --test` with K32_PODS_PER_THREAD=8 (test/wasm/helpers.ts then packs 8 request pods a shared
 * thread), so that freeze, snapshot, restore, thaw, logs, channels, limits and the fs quota are
 * checked on shared threads exactly as on threads of their own.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { ROOT } from './helpers.ts';

/** The suites that start pods (dev-cli's run in processes of their own; interp-mops starts none). */
const SUITES = ['examples', 'http', 'robustness', 'runtime', 'snapshot-stream'].map((n) => join(ROOT, 'test/wasm', `${n}.test.ts`));

test('the runtime suites pass with 8 pods a shared thread (K32_PODS_PER_THREAD=8)', { timeout: 300_000 }, async (t) => {
  const env: NodeJS.ProcessEnv = { ...process.env, K32_PODS_PER_THREAD: '8' };
  // A child of a test runner reports in the runner's own protocol unless this is unset.
  delete env.NODE_TEST_CONTEXT;
  const child = spawn(process.execPath, ['--test', '--test-reporter=spec', ...SUITES], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr.on('data', (d: Buffer) => {
    out += d.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  const failing = out.includes('failing tests:') ? out.slice(out.indexOf('failing tests:')) : out.slice(-4000);
  assert.equal(code, 0, `the dense run failed:\n${failing}`);
  assert.match(out, /# on a shared thread a call past its deadline ends the pod and stops the thread/, 'the one suite test that differs by design is skipped with its reason');
});
