// The API server's SIGTERM ends open watches cleanly (the chunked body's last chunk, as kube-apiserver's
// graceful shutdown), so a watching client sees its watch end, not a reset, and the process exits soon.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { CoreV1Api, Watch } from '@kubernetes/client-node';
import { startApiServer } from '../helpers/apiserver.ts';
import { waitFor } from '../helpers/wait.ts';

test('SIGTERM ends kubectl get -w and a client-node Watch cleanly', { timeout: 180_000 }, async (t) => {
  const api = await startApiServer(t, { args: ['--storage', 'memory'] });
  const core = api.kubeConfig.makeApiClient(CoreV1Api);
  await core.createNamespacedPod({ namespace: 'default', body: { metadata: { name: 'watched' }, spec: { containers: [{ name: 'c', image: 'x' }] } } });

  // client-node's Watch: done(err) on a reset or a broken body, done(null) on a clean end.
  const seen: string[] = [];
  let watchDone: ((err: unknown) => void) | undefined;
  const watchEnded = new Promise<unknown>((resolve) => {
    watchDone = resolve;
  });
  const watching = await new Watch(api.kubeConfig).watch('/api/v1/namespaces/default/pods', {}, (type: string, obj: { metadata: { name: string } }) => seen.push(`${type} ${obj.metadata.name}`), (err) => watchDone!(err));
  t.after(() => watching.abort());

  // kubectl get -w: its Table watch. A reset makes client-go log the broken stream on standard error.
  const child = spawn('kubectl', ['--kubeconfig', api.kubeconfigPath, '--cache-dir', join(api.dataDir, 'kubectl-cache'), 'get', 'pods', '-w', '-v=2'], { stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill());
  const lines: string[] = [];
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
  });
  createInterface(child.stdout!).on('line', (l) => lines.push(l));
  const kubectlExit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));

  await waitFor('both watches see the pod', 30_000, () => seen.includes('ADDED watched') && lines.some((l) => l.startsWith('watched')));
  // A change both get once they watch (kubectl's watch starts after its list): both streams are open.
  await core.patchNamespacedPod({ name: 'watched', namespace: 'default', body: [{ op: 'add', path: '/metadata/labels', value: { step: 'two' } }] });
  await waitFor('both watches see the change', 30_000, () => seen.includes('MODIFIED watched') && lines.filter((l) => l.startsWith('watched')).length >= 2);

  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) => api.proc.once('exit', (code, signal) => resolve({ code, signal })));
  const started = Date.now();
  api.proc.kill('SIGTERM');
  const bounded = <T>(p: Promise<T>, what: string) =>
    Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${what} within 20 s`)), 20_000).unref())]);
  const err = await bounded(watchEnded, 'the Watch ended');
  assert.equal(err ?? null, null, `the Watch ended with an error: ${String(err)}`);
  const code = await bounded(kubectlExit, 'kubectl exited');
  assert.doesNotMatch(stderr, /reset|unexpected EOF|Unable to decode|broken|error/i, stderr);
  assert.equal(code, 0, stderr);
  const exit = await bounded(exited, 'the API server exited');
  assert.equal(exit.code, 0, api.logs());
  assert.ok(Date.now() - started < 20_000);
});
