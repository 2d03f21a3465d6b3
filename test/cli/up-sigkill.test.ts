/**
 * `kube32-cli up` killed with SIGKILL leaves no child running (issue 19): the control plane and each
 * kube32-sim worker notice that their parent is gone (KUBE32_PARENT_PID, src/lib/parent-watch.ts) and
 * stop as on SIGTERM, the worker draining first.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isProcessAlive } from '../../src/lib/index.ts';
import { startCluster } from '../e2e/cluster.ts';
import { waitFor } from '../helpers/wait.ts';

test('up killed with SIGKILL: its control plane and worker stop on their own', { timeout: 240_000 }, async (t) => {
  const c = await startCluster(t, { workers: 1 });
  const children = [c.childPid('control-plane'), c.childPid('worker-1')];
  for (const pid of children) assert.ok(isProcessAlive(pid), `child ${pid} runs`);
  c.process.kill('SIGKILL');
  await waitFor('every child of the killed up to stop', 90_000, () => children.every((pid) => !isProcessAlive(pid)), { intervalMs: 250 });
});
