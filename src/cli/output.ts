/**
 * Output of kube32-cli in kubectl's forms: `-o json` (4-space indented JSON, as kubectl prints it), `-o yaml`, and the
 * default human form (a column table like `kubectl get`, or a one-line message like
 * `pod/x moved`). Human progress goes to standard error when the output is machine-readable, so that
 * `-o json` output can always be piped.
 */
import { createRequire } from 'node:module';
import { CliError } from './errors.ts';

export { outputOption } from './flags.ts';

/**
 * The YAML library, loaded on first use only (synchronously, through `require`): this module is also
 * loaded to build the command tree, where YAML is not needed.
 */
function yaml(): typeof import('yaml') {
  return createRequire(import.meta.url)('yaml') as typeof import('yaml');
}

/** The output formats of `-o`. `''` is the human form. */
export type OutputFormat = '' | 'json' | 'yaml' | 'name';

/**
 * Checks an `-o` value.
 * @throws CliError for an unknown format, with kubectl's message
 */
export function parseOutputFormat(value: string | undefined): OutputFormat {
  if (value === undefined || value === '') return '';
  if (value === 'json' || value === 'yaml' || value === 'name') return value;
  throw new CliError(`unable to match a printer suitable for the output format "${value}", allowed formats are: json,name,yaml`);
}

/**
 * Writes one object as `-o json` or `-o yaml` print it. YAML is written for YAML 1.1 readers, as
 * kubectl's is (go-yaml v2, sigs.k8s.io/yaml): strings that 1.1 reads as something else are quoted
 * (`"2026-12-03T14:30:04Z"`, `"on"`, `"yes"`, `"y"`), so that `kubectl apply -f` or PyYAML reads them back as
 * strings; YAML 1.2's rules left them bare, which kubectl read as a timestamp or a bool.
 * @param kindPlural for `-o name`: the resource, e.g. `checkpoint.kube32.io`
 */
export function formatObject(obj: unknown, format: Exclude<OutputFormat, ''>, kindPlural = ''): string {
  if (format === 'json') return `${JSON.stringify(obj, null, 4)}\n`;
  if (format === 'yaml') return yaml().stringify(obj, { lineWidth: 0, version: '1.1' });
  const name = (obj as { metadata?: { name?: string } }).metadata?.name ?? '';
  return `${kindPlural}/${name}\n`;
}

/**
 * Lays out rows as `kubectl get` does: upper-case headers, each column as wide as its widest cell,
 * three spaces between columns, no trailing spaces.
 * @param headers the column titles
 * @param rows cells, one array a row; `undefined` prints `<none>`
 */
export function formatTable(headers: string[], rows: (string | number | undefined)[][]): string {
  const cells = [headers.map((h) => h.toUpperCase()), ...rows.map((r) => r.map((c) => (c === undefined ? '<none>' : String(c))))];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells
    .map((r) =>
      r
        .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!)))
        .join('   ')
        .trimEnd(),
    )
    .map((line) => `${line}\n`)
    .join('');
}

/**
 * A byte count as `kubectl get ckpt` prints sizes: `512B`, `12.3KiB`, `1.5MiB`.
 * @param bytes a count of bytes
 */
export function formatSize(bytes: number): string {
  if (bytes < 1024) return `${bytes}B`;
  const units = ['KiB', 'MiB', 'GiB'];
  let v = bytes / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v >= 10 ? v.toFixed(0) : v.toFixed(1)}${units[i]}`;
}
