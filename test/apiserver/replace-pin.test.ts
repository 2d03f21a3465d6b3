/**
 * A moved pod keeps its module (seed 002, "Moves": the replacement runs the same image, and a
 * restore refuses a snapshot taken from another module): after another module is pushed under the
 * same name, `pods/<p>/replace` keeps the old digest, while a new pod gets the new one.
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { startApiServer } from '../helpers/apiserver.ts';

const CLI = new URL('../../bin/kube32-cli.js', import.meta.url).pathname;

/** A minimal request pod module; `n` makes each one's bytes (and digest) differ. */
function module(dir: string, n: number): string {
  const wat = join(dir, `m${n}.wat`);
  writeFileSync(wat, `(module (memory (export "memory") 1) (global (mut i32) (i32.const ${n})) (func (export "k32_tick")))`);
  execFileSync('wat2wasm', [wat, '-o', join(dir, `m${n}.wasm`)]);
  return join(dir, `m${n}.wasm`);
}

function push(kubeconfig: string, file: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [CLI, 'push', file, '--name', 'm', '--kubeconfig', kubeconfig], { timeout: 30_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`push: ${stderr}`)) : resolve(/sha256:([0-9a-f]{64})/.exec(stdout)?.[1] ?? ''),
    );
  });
}

test('a replacement keeps the module digest of the pod it replaces; a new pod resolves the name again', { timeout: 90_000 }, async (t) => {
  const api = await startApiServer(t);
  const dir = mkdtempSync(join(tmpdir(), 'k32-pin-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const first = await push(api.kubeconfigPath, module(dir, 1));
  const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'pinned' }, spec: { containers: [{ name: 'c', image: 'wasm://m' }] } };
  const created = await api.kubectl(['create', '-o', 'json', '-f', '-'], { input: JSON.stringify(pod) });
  assert.equal(created.code, 0, created.stderr);
  const old = JSON.parse(created.stdout) as { metadata: { uid: string; annotations: Record<string, string> } };
  assert.equal(old.metadata.annotations['kube32.io/image-sha256'], first);

  const second = await push(api.kubeconfigPath, module(dir, 2));
  assert.notEqual(second, first);

  const body = join(dir, 'replace.json');
  writeFileSync(body, JSON.stringify({ ...pod, metadata: { name: 'pinned', uid: old.metadata.uid, annotations: { 'kube32.io/restore-from': 'ck' } }, spec: { ...pod.spec, nodeName: 'n2' } }));
  const replaced = await api.kubectl(['create', '--raw', '/api/v1/namespaces/default/pods/pinned/replace', '-f', body]);
  assert.equal(replaced.code, 0, replaced.stderr);
  const fresh = JSON.parse(replaced.stdout) as { metadata: { uid: string; annotations: Record<string, string> } };
  assert.notEqual(fresh.metadata.uid, old.metadata.uid);
  assert.equal(fresh.metadata.annotations['kube32.io/image-sha256'], first, 'the replacement runs the module the pod ran');

  const other = await api.kubectl(['create', '-o', 'json', '-f', '-'], { input: JSON.stringify({ ...pod, metadata: { name: 'newer' } }) });
  assert.equal(other.code, 0, other.stderr);
  assert.equal((JSON.parse(other.stdout) as typeof old).metadata.annotations['kube32.io/image-sha256'], second, 'a new pod gets the module pushed last');
});
