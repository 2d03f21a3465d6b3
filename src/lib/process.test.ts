import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { isProcessAlive } from './process.ts';

test('isProcessAlive: this process is alive; a child that exited and was reaped is not', { timeout: 10_000 }, async () => {
  assert.equal(isProcessAlive(process.pid), true);
  const child = spawn(process.execPath, ['-e', '0']);
  const pid = child.pid!;
  await once(child, 'exit');
  assert.equal(isProcessAlive(pid), false);
});

test('isProcessAlive: a killed child that nobody reaped yet (a zombie) counts as gone', { timeout: 20_000 }, async (t) => {
  // sh starts a sleeper in the background, kills it with SIGKILL and does not wait for it: the
  // sleeper stays a zombie until sh exits. sh prints its pid and then blocks on its stdin.
  const sh = spawn('sh', ['-c', 'sleep 30 & p=$!; kill -9 $p; echo $p; read x'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const shExited = once(sh, 'exit');
  // sh waits on its stdin: end it (and sh) even when an assertion fails, or the file never ends.
  t.after(async () => {
    sh.kill('SIGKILL');
    await shExited;
  });
  const [line] = (await once(sh.stdout!, 'data')) as [Buffer];
  const pid = Number(line.toString().trim());
  // kill(2) only queues the SIGKILL: the sleeper becomes a zombie when the kernel next runs it, which
  // on a loaded machine takes a while (a bound of 100 event-loop turns failed there).
  const deadline = Date.now() + 10_000;
  let state = '';
  for (;;) {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    state = stat.charAt(stat.lastIndexOf(')') + 2);
    if (state === 'Z' || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  assert.equal(state, 'Z', 'the sleeper is a zombie');
  assert.equal(isProcessAlive(pid), false);
  sh.stdin!.end('\n');
  await shExited;
});
