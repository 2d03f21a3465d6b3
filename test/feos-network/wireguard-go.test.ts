// Starting wireguard-go and finding a UAPI socket's server (src/feos/network/wireguard-go.ts), without
// root: stand-in programs for wireguard-go (shell scripts) and a unix socket served by a child process.
// The real wireguard-go in network namespaces: test/root/feos-network/mesh-device.test.ts.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { checkUapiServer, lastLines, resolveExecutable, startWireguardGo, uapiServer } from '../../src/feos/network/index.ts';

const dir = mkdtempSync(join(tmpdir(), 'k32t-wggo-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A shell script standing in for wireguard-go. */
function script(name: string, body: string, mode = 0o755): string {
  const file = join(dir, name);
  writeFileSync(file, `#!/bin/sh\n${body}\n`);
  chmodSync(file, mode);
  return file;
}

const BANNER = '┌────┐\n│   Running wireguard-go is not required   │\n└────┘\n';

test('lastLines: the last lines, the banner about kernel WireGuard and blank lines left out', () => {
  assert.equal(lastLines(`${BANNER}\nERROR: (wg0) UAPI listen error: unix socket in use\n`), 'ERROR: (wg0) UAPI listen error: unix socket in use');
  assert.equal(lastLines('1\n2\n3\n4\n5\n6\n7', 3), '5; 6; 7');
  assert.equal(lastLines(BANNER), '');
});

test('resolveExecutable: a path as it is, a name in PATH, undefined for none', async () => {
  const f = script('wg-a', 'exit 0');
  assert.equal(await resolveExecutable(f), f);
  assert.equal(await resolveExecutable('wg-a', `/nonexistent:${dir}`), f);
  assert.equal(await resolveExecutable('wg-b', dir), undefined);
  assert.equal(await resolveExecutable(join(dir, 'none')), undefined);
});

test('startWireguardGo names the cause: not installed, not runnable, the exit status with what it said', { timeout: 20_000 }, async () => {
  await assert.rejects(startWireguardGo(join(dir, 'none'), 'wg0'), (e: Error & { code: string }) => {
    assert.equal(e.code, 'FAILED_PRECONDITION');
    assert.equal(e.message, `wireguard-go is not installed (no file ${join(dir, 'none')}): apt-get install wireguard-go, or give its path with --wireguard-go`);
    return true;
  });
  const saved = process.env.PATH;
  process.env.PATH = join(dir, 'empty');
  try {
    await assert.rejects(startWireguardGo('wireguard-go', 'wg0'), /wireguard-go is not installed \(no wireguard-go in PATH \(.*empty\)\): apt-get install wireguard-go/);
  } finally {
    process.env.PATH = saved;
  }
  await assert.rejects(startWireguardGo(script('wg-noexec', 'exit 0', 0o644), 'wg0'), /wireguard-go .*wg-noexec cannot be run: permission denied/);
  // Its errors on stdout (as wireguard-go logs them), its banner on stderr; no LOG_LEVEL of feosd's.
  const failing = script('wg-fail', `printf '${BANNER.replaceAll('\n', '\\n')}' >&2\necho "level=[$LOG_LEVEL]"\necho "ERROR: ($1) Failed to create TUN device: no such device"\nexit 3`);
  process.env.LOG_LEVEL = 'info';
  try {
    await assert.rejects(startWireguardGo(failing, 'wg0'), (e: Error) => {
      assert.equal(e.message, `\`${failing} wg0\` exited with status 3: level=[]; ERROR: (wg0) Failed to create TUN device: no such device`);
      return true;
    });
  } finally {
    delete process.env.LOG_LEVEL;
  }
  assert.equal(await startWireguardGo(script('wg-ok', 'exit 0'), 'wg0'), join(dir, 'wg-ok'));
});

test("uapiServer finds the process serving a unix socket, its namespace and TUN devices; checkUapiServer refuses one without the device", { timeout: 20_000 }, async () => {
  const sock = join(dir, 'wg9.sock');
  assert.equal(await uapiServer(sock), undefined, 'no socket');
  const server = spawn(process.execPath, ['-e', `require('node:net').createServer((c) => c.on('error', () => {})).listen(${JSON.stringify(sock)}, () => console.log('ready'))`], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await new Promise<void>((resolve) => server.stdout!.once('data', () => resolve()));
    const found = await uapiServer(sock);
    assert.equal(found?.pid, server.pid);
    const comm = readFileSync(`/proc/${server.pid}/comm`, 'utf8').trim(); // MainThread for Node 24
    assert.equal(found?.name, comm);
    assert.deepEqual(found?.tunDevices, []);
    await assert.rejects(checkUapiServer('wg9', sock, found!, false), (e: Error & { code: string }) => {
      assert.equal(e.code, 'FAILED_PRECONDITION');
      assert.match(e.message, new RegExp(`^the mesh device wg9: its UAPI socket ${sock} is served by ${comm} \\(pid ${server.pid}\\), which serves no TUN device, and wg9 is not a device of feosd's network namespace; give this node another mesh device name with --mesh-device`));
      return true;
    });
    await assert.rejects(checkUapiServer('wg9', sock, { ...found!, netns: 'net:[1]' }, true), /is served by \S+ \(pid \d+\) in another network namespace \(net:\[1\], not feosd's net:\[\d+\]\): another node on this machine uses the name wg9; give this node another mesh device name with --mesh-device/);
  } finally {
    server.kill();
  }
});
