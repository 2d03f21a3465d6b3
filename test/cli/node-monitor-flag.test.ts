/**
 * `--node-monitor-grace-period` not longer than the nodes' status interval (10 s) is refused by
 * `kube32-cli control-plane` and `kube32-cli up` before anything starts (issue 19: nodes flapped
 * between Ready and NotReady with 10 s), with a message that says what to use.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

const CLI = new URL('../../bin/kube32-cli.js', import.meta.url).pathname;

function cli(args: string[]): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { timeout: 60_000 }, (err, _stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      resolve({ code, stderr: String(stderr) });
    });
  });
}

test('a node monitor grace period not longer than the status interval is refused', { timeout: 120_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'k32-nmgp-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  for (const [cmd, value] of [
    ['control-plane', '10s'],
    ['control-plane', '5s'],
    ['up', '10s'],
  ] as const) {
    const data = join(dir, `${cmd}-${value}`);
    const r = await cli([cmd, '--data-dir', data, '--port', '0', '--node-monitor-grace-period', value, ...(cmd === 'up' ? ['--workers', '0'] : [])]);
    assert.equal(r.code, 1, `${cmd} ${value}: ${r.stderr}`);
    assert.match(r.stderr, new RegExp(`--node-monitor-grace-period must be longer than the nodes' status interval \\(10s\\), or nodes on time turn NotReady between two renewals: current value is ${value}; use at least 20s`));
    let left: string[] = [];
    try {
      left = readdirSync(data);
    } catch {
      left = [];
    }
    assert.deepEqual(left.filter((f) => f.endsWith('.db')), [], 'nothing was started');
  }
});
