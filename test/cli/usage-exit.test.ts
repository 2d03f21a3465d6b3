/**
 * Usage errors of the FeOS command lines follow kubectl's convention: a message on standard error naming
 * what to fix, nothing on standard output, exit code 1 (kubectl exits 1 on an unknown flag or a missing
 * argument). feosctl, `kube32-cli feos token ...` and `kube32-cli control-plane --feos-*` exited 2.
 * None of these reaches a feosd or a cluster: the socket and the kubeconfig name nothing.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

const ROOT = new URL('../../', import.meta.url).pathname;

function run(bin: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  // feosctl --node takes $KUBECONFIG: none, there; kube32-cli: one that names nothing.
  const env = { ...process.env, KUBECONFIG: bin === 'feosctl.js' ? '' : '/nonexistent/kubeconfig' };
  return new Promise((resolve) => {
    execFile(process.execPath, [join(ROOT, 'bin', bin), ...args], { timeout: 30_000, env }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? -1) : 0, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

test('feosctl and kube32-cli feos: an unknown flag, a missing argument or a bad value says what to fix on stderr and exits 1, as kubectl', { timeout: 120_000 }, async () => {
  const cases: Array<[string, string[], RegExp]> = [
    ['feosctl.js', ['--socket', '/nonexistent.sock', 'pod', 'create', '--bogus'], /unknown option '--bogus'/],
    ['feosctl.js', ['--socket', '/nonexistent.sock', 'pod', 'delete'], /missing required argument 'id'/],
    ['feosctl.js', ['--socket', '/nonexistent.sock', 'pod', 'create', '--vcpus', 'x'], /--vcpus "x": want a whole number from 1 to 32/],
    ['feosctl.js', ['--socket', '/nonexistent.sock', 'bogus'], /unknown command 'bogus'/],
    ['feosctl.js', ['--node', 'n1', 'pod', 'list'], /--node needs --kubeconfig/],
    ['kube32-cli.js', ['feos', 'token', 'create', '--bogus'], /unknown option '--bogus'/],
    ['kube32-cli.js', ['feos', 'token', 'delete'], /missing required argument 'id'/],
    ['kube32-cli.js', ['feos', 'token', 'create', '--ttl', 'xx'], /--ttl "xx": .*want a duration such as 24h/],
    ['kube32-cli.js', ['feos', 'token', 'delete', 'BAD'], /token ID "BAD": want the 6 characters/],
    ['kube32-cli.js', ['control-plane', '--data-dir', '/nonexistent/d', '--feos-listen', 'nope'], /--feos-listen "nope": want ADDRESS:PORT/],
    ['kube32-cli.js', ['control-plane', '--data-dir', '/nonexistent/d', '--feos-mesh-node-limit', '0'], /--feos-mesh-node-limit "0": want a whole number/],
  ];
  for (const [bin, args, message] of cases) {
    const r = await run(bin, args);
    const what = `${bin} ${args.join(' ')}: exit ${r.code}, stderr ${JSON.stringify(r.stderr.slice(0, 300))}`;
    assert.equal(r.code, 1, what);
    assert.match(r.stderr, message, what);
    assert.equal(r.stdout, '', what);
  }
});
