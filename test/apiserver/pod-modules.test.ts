/**
 * A pod runs one module: the API server pins one digest a pod (`kube32.io/image-sha256`) and the kubelet
 * takes it for every container whose image is not a digest. A pod whose containers name different
 * modules (init containers included), or a module beside an image that names none, is refused with
 * 422 Invalid naming the container, rather than created and run with the first container's module in
 * every container (found by a user: `wasm://counter` beside an init container `step` ran `step`).
 * `kubectl explain pod.spec.containers` says so. A pod with init containers is refused: the kubelet never
 * runs them (`kubectl explain pod.spec.initContainers` says so).
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { startApiServer } from '../helpers/apiserver.ts';

const CLI = new URL('../../bin/kube32-cli.js', import.meta.url).pathname;

/** Pushes a minimal module named `name`; `n` makes its bytes (and digest) its own. Resolves to the digest. */
function push(kubeconfig: string, dir: string, name: string, n: number): Promise<string> {
  const wat = join(dir, `${name}.wat`);
  writeFileSync(wat, `(module (memory (export "memory") 1) (global (mut i32) (i32.const ${n})) (func (export "k32_tick")))`);
  execFileSync('wat2wasm', [wat, '-o', join(dir, `${name}.wasm`)]);
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [CLI, 'push', join(dir, `${name}.wasm`), '--name', name, '--kubeconfig', kubeconfig], { timeout: 30_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`push: ${stderr}`)) : resolve(/sha256:([0-9a-f]{64})/.exec(stdout)?.[1] ?? ''),
    );
  });
}

test('a pod whose containers name different modules is refused; one module in every container is pinned', { timeout: 90_000 }, async (t) => {
  const api = await startApiServer(t);
  const dir = mkdtempSync(join(tmpdir(), 'k32-pod-modules-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const a = await push(api.kubeconfigPath, dir, 'mod-a', 1);
  const b = await push(api.kubeconfigPath, dir, 'mod-b', 2);
  assert.notEqual(a, b);
  const create = (name: string, spec: unknown) => api.kubectl(['create', '-o', 'json', '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name }, spec }) });

  // A container of one module and a container of another.
  let r = await create('mixed-two', { containers: [{ name: 'first', image: 'mod-b' }, { name: 'app', image: 'wasm://mod-a' }] });
  assert.notEqual(r.code, 0, 'created a pod whose containers name two modules');
  assert.match(r.stderr, /The Pod "mixed-two" is invalid: spec\.containers\[1\]\.image: Invalid value: "wasm:\/\/mod-a": a Kube32 pod runs one module: every container's image must name the module of spec\.containers\[0\]\.image \("mod-b", sha256:[0-9a-f]{12}\)/);
  r = await api.kubectl(['get', 'pod', 'mixed-two']);
  assert.match(r.stderr, /NotFound/, 'nothing was stored');

  // Two containers of two modules, and a module beside an image that names none (it would run mod-a).
  r = await create('mixed', { containers: [{ name: 'a', image: 'wasm://mod-a' }, { name: 'b', image: `kube32.io/wasm-sha256:${b}` }] });
  assert.match(r.stderr, /spec\.containers\[1\]\.image: Invalid value: "kube32\.io\/wasm-sha256:[0-9a-f]{64}": a Kube32 pod runs one module/);
  r = await create('beside', { containers: [{ name: 'a', image: 'wasm://mod-a' }, { name: 'web', image: 'nginx' }] });
  assert.match(r.stderr, /spec\.containers\[1\]\.image: Invalid value: "nginx": a Kube32 pod runs one module/);

  // The same module in every container, named three ways: created, pinned to it.
  r = await create('same', { containers: [{ name: 'i', image: 'mod-a' }, { name: 'a', image: 'wasm://mod-a' }, { name: 'b', image: `kube32.io/wasm-sha256:${a}` }] });
  assert.equal(r.code, 0, r.stderr);
  assert.equal((JSON.parse(r.stdout) as { metadata: { annotations: Record<string, string> } }).metadata.annotations['kube32.io/image-sha256'], a);
  // An image that names no module, alone, is left to the kubelet as before.
  r = await create('unknown', { containers: [{ name: 'c', image: 'not-pushed' }] });
  assert.equal(r.code, 0, r.stderr);

  // kubectl explain says so beside the field, before Kubernetes' description.
  r = await api.kubectl(['explain', 'pod.spec.containers']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /DESCRIPTION:\n\s+Kube32 runs one WebAssembly module a pod: every container's image must name\s+the same module/, r.stdout);
});

test('a pod with init containers is refused (the kubelet never runs them); explain says so', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t);
  // Found by a user: a pod with an init container ran its container alone, as if the init container had run.
  const spec = { restartPolicy: 'Never', initContainers: [{ name: 'init', image: 'step' }], containers: [{ name: 'main', image: 'step' }] };
  let r = await api.kubectl(['create', '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'withinit' }, spec }) });
  assert.notEqual(r.code, 0, 'a pod with init containers was created');
  assert.match(r.stderr, /The Pod "withinit" is invalid: spec\.initContainers: Forbidden: Kube32 does not run init containers: do that work in the module \(its k32_init runs once, when it starts\) or in a Job that runs first/);
  r = await api.kubectl(['create', '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'noinit' }, spec: { ...spec, initContainers: [] } }) });
  assert.equal(r.code, 0, r.stderr);
  r = await api.kubectl(['explain', 'pod.spec.initContainers']);
  assert.match(r.stdout, /DESCRIPTION:\n\s+Not supported by Kube32: a pod that has init containers is refused \(422\s+Invalid\), since they would not run\./, r.stdout);
});

test('kubectl explain says which container fields Kube32 keeps but does not run: probes, lifecycle hooks, command, args', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t);
  // Found by a user: a readinessProbe on a path and port nothing serves, and a livenessProbe of `false`:
  // the pod was 1/1 Running, with no word anywhere that probes are not run.
  for (const field of ['livenessProbe', 'readinessProbe', 'startupProbe']) {
    const r = await api.kubectl(['explain', `pod.spec.containers.${field}`]);
    assert.match(r.stdout, /DESCRIPTION:\n\s+Kept but not run by Kube32: the kubelet runs no probes, and a container is\s+Ready while its module runs\./, `${field}: ${r.stdout}`);
  }
  let r = await api.kubectl(['explain', 'deployment.spec.template.spec.containers.lifecycle']);
  assert.match(r.stdout, /DESCRIPTION:\n\s+Kept but not run by Kube32: the kubelet runs no postStart or preStop hooks/, r.stdout);
  for (const field of ['command', 'args']) {
    r = await api.kubectl(['explain', `job.spec.template.spec.containers.${field}`]);
    assert.match(r.stdout, /DESCRIPTION:\n\s+Kept but not run by Kube32: a module has no processes and no command line\./, `${field}: ${r.stdout}`);
  }
});

test("an update that changes a WebAssembly pod's image is refused, naming what to do; other pods' images still change", { timeout: 90_000 }, async (t) => {
  const api = await startApiServer(t);
  const dir = mkdtempSync(join(tmpdir(), 'k32-pod-image-update-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  await push(api.kubeconfigPath, dir, 'mod-a', 1);
  await push(api.kubeconfigPath, dir, 'mod-b', 2);
  const create = (name: string, image: string) =>
    api.kubectl(['create', '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name }, spec: { containers: [{ name: 'c', image }] } }) });
  assert.equal((await create('p', 'wasm://mod-a')).code, 0);
  // It was taken (pod/p image updated) and the node went on running mod-a, the spec naming mod-b.
  let r = await api.kubectl(['set', 'image', 'pod/p', 'c=wasm://mod-b']);
  assert.notEqual(r.code, 0, 'the image of a pod pinned to mod-a changed');
  assert.match(r.stderr, /spec\.containers\[0\]\.image: Forbidden: a Kube32 pod runs the module it was created with \("wasm:\/\/mod-a", sha256:[0-9a-f]{12}\), and its snapshots name it: create a new pod with "wasm:\/\/mod-b"/);
  r = await api.kubectl(['patch', 'pod', 'p', '-p', JSON.stringify({ spec: { containers: [{ name: 'c', image: 'mod-b' }] } })]);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /Forbidden: a Kube32 pod runs the module it was created with/);
  r = await api.kubectl(['get', 'pod', 'p', '-o', 'jsonpath={.spec.containers[0].image}']);
  assert.equal(r.stdout, 'wasm://mod-a');
  // What an update may change otherwise still changes.
  r = await api.kubectl(['patch', 'pod', 'p', '-p', '{"spec":{"activeDeadlineSeconds":60}}']);
  assert.equal(r.code, 0, r.stderr);
  // A pod no module was resolved for (no kube32.io/image-sha256) changes its image as in Kubernetes.
  assert.equal((await create('other', 'not-pushed')).code, 0);
  r = await api.kubectl(['set', 'image', 'pod/other', 'c=still-not-pushed']);
  assert.equal(r.code, 0, r.stderr);
});

test('a wasm:// image that cannot name a module is refused as invalid, not as a module to push', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t);
  const create = (image: string) =>
    api.kubectl(['create', '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'bad-image' }, spec: { containers: [{ name: 'c', image }] } }) });
  for (const image of ['wasm://Bad Name', 'wasm://a/b', 'wasm://../x']) {
    const r = await create(image);
    assert.equal(r.code, 1, r.stderr);
    const name = image.slice('wasm://'.length).replace(/[.]/g, '\\.');
    assert.match(r.stderr, new RegExp(`spec\\.containers\\[0\\]\\.image: Invalid value: "wasm://${name}": "${name}" cannot be a module's name: a lowercase RFC 1123 subdomain must consist of`));
    assert.doesNotMatch(r.stderr, /push it with/, 'pushing under that name is refused too');
  }
  const empty = await create('wasm://');
  assert.match(empty.stderr, /Invalid value: "wasm:\/\/": it names no module: want wasm:\/\/NAME, NAME the --name of kube32-cli push/);
  // A good name nobody pushed is still Not found, with what to do.
  const missing = await create('wasm://nosuch');
  assert.match(missing.stderr, /Not found: "wasm:\/\/nosuch": no module "nosuch" is stored \(push it with kube32-cli push\)/);
});
