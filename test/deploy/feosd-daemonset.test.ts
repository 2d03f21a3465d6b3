// deploy/feosd-daemonset.yaml (seed 000, "On Kubernetes"; docs/feos/kubernetes.md) against the project's
// API server with the real kubectl: a server-side dry run accepts it, creating nothing, and the pod it
// makes is what the seed asks for.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import { startApiServer } from '../helpers/apiserver.ts';

const MANIFEST = join(new URL('../../', import.meta.url).pathname, 'deploy/feosd-daemonset.yaml');

test('kubectl apply --dry-run=server takes deploy/feosd-daemonset.yaml and creates nothing', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  // A server-side dry run of a namespaced object needs its Namespace to exist, as on any Kubernetes
  // (a dry run creates none): without, the server says NotFound for the namespace.
  const none = await api.kubectl(['apply', '--dry-run=server', '-f', MANIFEST]);
  assert.notEqual(none.code, 0);
  assert.match(none.stderr, /namespaces "feos-system" not found/);
  assert.equal((await api.kubectl(['create', 'namespace', 'feos-system'])).code, 0);
  const r = await api.kubectl(['apply', '--dry-run=server', '-f', MANIFEST]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /daemonset\.apps\/feosd created \(server dry run\)/);
  const ds = await api.kubectl(['get', 'daemonsets', '-A', '-o', 'name']);
  assert.equal(ds.code, 0, ds.stderr);
  assert.equal(ds.stdout.trim(), '', 'a dry run creates nothing');
  // The server's own view of it, as a create would store it.
  const out = await api.kubectl(['apply', '--dry-run=server', '-f', MANIFEST, '-o', 'json']);
  assert.equal(out.code, 0, out.stderr);
  const items = JSON.parse(out.stdout).items as Array<{ kind: string; spec: { template: { spec: Record<string, unknown> & { containers: Array<Record<string, unknown>>; volumes: Array<{ name: string; hostPath?: { path: string } }> } } } }>;
  const spec = items.find((i) => i.kind === 'DaemonSet')!.spec.template.spec;
  assert.equal(spec.shareProcessNamespace, true);
  assert.equal(spec.hostNetwork, true);
  assert.equal(spec.terminationGracePeriodSeconds, 300);
  const c = spec.containers[0] as { command: string[]; args: string[]; securityContext: { privileged: boolean } };
  assert.deepEqual(c.command, ['/usr/sbin/feosd']);
  assert.ok(c.args.includes('--suspend-on-stop'));
  // terminationGracePeriodSeconds and --stop-grace say the same grace.
  assert.ok(c.args.includes(`--stop-grace=${spec.terminationGracePeriodSeconds}`));
  assert.equal(c.securityContext.privileged, true);
  const host = Object.fromEntries(spec.volumes.filter((v) => v.hostPath).map((v) => [v.hostPath!.path, v.name]));
  for (const p of ['/dev', '/var/lib/feos', '/usr/lib/feos']) assert.ok(host[p], `hostPath ${p}`);
  // The file itself parses as two objects, the Namespace first.
  assert.deepEqual(parseAllDocuments(readFileSync(MANIFEST, 'utf8')).map((d) => (d.toJS() as { kind: string }).kind), ['Namespace', 'DaemonSet']);
});
