/**
 * Kube32's components meet only at their doors (docs/development.md "Layout"; issue 25): a file of one
 * component imports another component only through its `index.ts`, and some components may not import
 * others at all: the controllers and the kubelets meet only through the API, the controllers are the API
 * server's clients, and `src/api` and `src/lib` stand below every component. The test reads every import
 * of `src/`, `test/` and `bench/` as text and fails naming each import that breaks a rule.
 *
 * Tests and benchmarks may reach into a component only for what {@link TEST_REACH} lists (white-box
 * end-to-end tests of a component's parts); a new inner import there must be added to it on purpose.
 */
import assert from 'node:assert/strict';
import { globSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Kube32's components (FeOS, `src/feos`, has its own layers and doors). */
const COMPONENTS = ['api', 'apiserver', 'cli', 'controllers', 'fleet', 'k32s', 'kubelet', 'lib', 'wasm'] as const;
type Component = (typeof COMPONENTS)[number];

/** Imports between components that are refused whatever file they name. */
const FORBIDDEN: Record<Component, readonly Component[]> = {
  // The lowest layers import no component of Kube32 (src/api stands on src/lib only).
  lib: ['api', 'apiserver', 'cli', 'controllers', 'fleet', 'k32s', 'kubelet', 'wasm'],
  k32s: ['api', 'apiserver', 'cli', 'controllers', 'fleet', 'kubelet', 'wasm'],
  wasm: ['api', 'apiserver', 'cli', 'controllers', 'fleet', 'kubelet'],
  api: ['apiserver', 'cli', 'controllers', 'fleet', 'kubelet', 'wasm'],
  // The API server serves the controllers and the kubelets; it imports neither.
  apiserver: ['cli', 'controllers', 'fleet', 'kubelet'],
  // The controllers are the API server's clients, and meet the kubelets only through the API.
  controllers: ['apiserver', 'cli', 'fleet', 'kubelet'],
  kubelet: ['apiserver', 'cli', 'controllers', 'fleet'],
  // The FeOS nodes' bridge speaks FeOS's protos and the Kubernetes API as a client: no Kube32 internals.
  fleet: ['apiserver', 'cli', 'controllers', 'kubelet', 'wasm', 'k32s'],
  cli: [],
};

/** Inner files of components that tests and benchmarks may import (white-box tests of those parts). */
const TEST_REACH: ReadonlySet<string> = new Set([
  'src/apiserver/auth/rbac.ts',
  'src/apiserver/auth/root-ca.ts',
  'src/apiserver/bootstrap.ts',
  'src/apiserver/checkpoint-data-peers.ts',
  'src/apiserver/cluster-identity.ts',
  'src/apiserver/errors.ts',
  'src/apiserver/handlers/context.ts',
  'src/apiserver/handlers/feos-pods.ts',
  'src/apiserver/handlers/openapi-notes.ts',
  'src/apiserver/handlers/protobuf.ts',
  'src/apiserver/pki.ts',
  'src/apiserver/registry/apply.ts',
  'src/apiserver/registry/batch/cronjobs.ts',
  'src/apiserver/registry/checkpoints/data-store.ts',
  'src/apiserver/registry/gc.ts',
  'src/apiserver/registry/patch.ts',
  'src/apiserver/registry/pods/index.ts',
  'src/apiserver/registry/pods/node-usage.ts',
  'src/apiserver/registry/quota/index.ts',
  'src/apiserver/registry/selectors.ts',
  'src/apiserver/registry/store.ts',
  'src/apiserver/storage/etcd.ts',
  'src/apiserver/storage/index.ts',
  'src/cli/api-client.ts',
  'src/cli/apiserver-flags.ts',
  'src/cli/commands/cluster.ts',
  'src/cli/kubeconfig.ts',
  'src/cli/local-cluster.ts',
  'src/cli/node-credentials.ts',
  'src/cli/output.ts',
  'src/cli/worker-addresses.ts',
  'src/controllers/checkpoint/timeline.ts',
  'src/kubelet/auth.ts',
  'src/kubelet/client.ts',
  'src/kubelet/pod-ports.ts',
  'src/kubelet/pod-spec.ts',
  'src/kubelet/pods.ts',
  'src/kubelet/server.ts',
  'src/wasm/binary.ts',
  'src/wasm/warm-up.ts',
  'src/wasm/wasm-api.ts',
]);

/** The component a repository path belongs to, if it is one of Kube32's. */
function componentOf(path: string): Component | undefined {
  const m = /^src\/([^/]+)\//.exec(path);
  return m && (COMPONENTS as readonly string[]).includes(m[1]!) ? (m[1] as Component) : undefined;
}

/** Every relative import (static, dynamic, re-export) in `text`, the source of `file`, as repository paths. */
function importsOf(file: string, text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)'(\.{1,2}\/[^']+)'/gm)) {
    out.push(normalize(join(dirname(file), m[1]!)));
  }
  return out;
}

/** The broken rules of `sources` (repository path → text), one line each. */
function violations(sources: ReadonlyMap<string, string>): string[] {
  const found: string[] = [];
  for (const [file, text] of sources) {
    const from = componentOf(file);
    const isTestOrBench = file.startsWith('test/') || file.startsWith('bench/');
    for (const target of importsOf(file, text)) {
      const to = componentOf(target);
      if (!to || to === from) continue;
      if (from && FORBIDDEN[from].includes(to)) {
        found.push(`${file}: src/${from} may not import src/${to} (${target})`);
        continue;
      }
      const door = `src/${to}/index.ts`;
      if (target === door) continue;
      if (isTestOrBench && TEST_REACH.has(target)) continue;
      found.push(`${file}: imports ${target}, an inner file of src/${to}: import ${door} instead${isTestOrBench ? ' (or list it in TEST_REACH)' : ''}`);
    }
  }
  return found;
}

/** The TypeScript sources of the repository (generated code left out). */
function repositorySources(): Map<string, string> {
  const files = [...globSync('src/**/*.ts', { cwd: ROOT }), ...globSync('test/**/*.ts', { cwd: ROOT }), ...globSync('bench/**/*.ts', { cwd: ROOT })]
    .map((f) => relative(ROOT, join(ROOT, f)))
    .filter((f) => !f.startsWith('src/feos/gen/') && f !== 'test/architecture/doors.test.ts');
  return new Map(files.map((f) => [f, readFileSync(join(ROOT, f), 'utf8')]));
}

test('components import each other only through their doors, and never across a forbidden seam', { timeout: 30_000 }, () => {
  const sources = repositorySources();
  assert.ok(sources.has('src/api/index.ts') && sources.size > 300, `the sources were found (${sources.size} files)`);
  assert.deepEqual(violations(sources), []);
});

test('the rule refuses an import from the controllers into the kubelet, from the API server into the controllers, into an inner file', { timeout: 30_000 }, () => {
  const bad = new Map([
    ['src/controllers/runtime/pods.ts', "import { podSpecBlockers } from '../../kubelet/index.ts';\n"],
    ['src/apiserver/registry/pods/eviction.ts', "import {\n  budgetCounts,\n  pickNode,\n} from '../../../controllers/index.ts';\n"],
    ['src/cli/actions/x.ts', "const { Registry } = await import('../../apiserver/registry/store.ts');\n"],
    ['test/kubelet/x.test.ts', "export { x } from '../../src/kubelet/pod-worker.ts';\n"],
    ['src/kubelet/ok.ts', "import { ANNOTATIONS } from '../api/index.ts';\nimport { x } from './pods.ts';\n"],
  ]);
  assert.deepEqual(violations(bad), [
    'src/controllers/runtime/pods.ts: src/controllers may not import src/kubelet (src/kubelet/index.ts)',
    'src/apiserver/registry/pods/eviction.ts: src/apiserver may not import src/controllers (src/controllers/index.ts)',
    'src/cli/actions/x.ts: imports src/apiserver/registry/store.ts, an inner file of src/apiserver: import src/apiserver/index.ts instead',
    'test/kubelet/x.test.ts: imports src/kubelet/pod-worker.ts, an inner file of src/kubelet: import src/kubelet/index.ts instead (or list it in TEST_REACH)',
  ]);
});
