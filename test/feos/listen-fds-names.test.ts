// feosd given sockets by systemd's protocol (LISTEN_FDS) that are not feosd.socket's pair named dns
// (seed "DNS"; docs/feos/packages.md): it says what to fix and exits 1 before it starts, rather than
// bind resolver sockets of its own that the handed ones would block. Debian's python3 hands the
// sockets over as systemd does (fds from 3, LISTEN_PID its own pid, then exec), on 127.0.0.1.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { handOverArgs } from '../helpers/listen-fds.ts';

const FEOSD = join(import.meta.dirname, '../../bin/feosd.js');

test('feosd handed sockets not named dns, or half the pair, says so and exits 1', { timeout: 120_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'k32t-fdnames-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const feosd = (names: string, kinds: ('udp' | 'tcp')[]) =>
    new Promise<{ code: number | null; err: string }>((resolve) => {
      const child = spawn('/usr/bin/python3', handOverArgs({ address: '127.0.0.1', port: 0, names, kinds }, [process.execPath, FEOSD, '--state-dir', join(dir, 'state'), '--run-dir', join(dir, 'run')]), { stdio: ['ignore', 'ignore', 'pipe'] });
      let err = '';
      child.stderr.on('data', (d) => {
        err += d;
      });
      child.once('close', (code) => resolve({ code, err }));
    });
  const misnamed = await feosd('resolver:resolver', ['udp', 'tcp']);
  assert.equal(misnamed.code, 1, misnamed.err);
  assert.match(misnamed.err, /feosd: LISTEN_FDS handed 2 socket\(s\) named "resolver:resolver" \(LISTEN_FDNAMES\), but the resolver takes a UDP socket and a listening TCP socket both named dns: name them so \(FileDescriptorName=dns in feosd\.socket/);
  const half = await feosd('dns', ['udp']);
  assert.equal(half.code, 1, half.err);
  assert.match(half.err, /feosd: LISTEN_FDS handed 1 socket\(s\) named "dns"/);
  // Nothing started: no API socket.
  assert.doesNotMatch(misnamed.err + half.err, /feosd serving/);
});
