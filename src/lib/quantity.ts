/**
 * Kubernetes resource quantities (`256Mi`, `1Gi`, `64k`, `500m`, `1e3`), as in
 * `k8s.io/apimachinery/pkg/api/resource`. Only what the projects need: parse to a number of base
 * units, and format bytes back in binary suffixes.
 *
 * Why not @kubernetes/client-node's `quantityToScalar` (its `dist/util.js`, which the package's index does
 * not export): it refuses quantities Kubernetes takes (`1.5Gi`, `2.5M`: "Cannot convert 1.5 to a BigInt"),
 * answers a `bigint` for suffixed values and a `number` for others (so callers convert twice), its error
 * names no fix, and it has no formatting back to `64Ki` as kubectl prints. Checked with client-node 2.0.1.
 */

const SUFFIX: Record<string, number> = {
  '': 1, n: 1e-9, u: 1e-6, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
};
const QUANTITY = /^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$/;

/**
 * Parses a quantity into base units (bytes for memory, cores for CPU).
 * @param text such as `"256Mi"`, `"64Ki"`, `"1G"`, `"500m"`, `"12e3"`, or a bare number
 * @returns the value in base units (bytes for memory); may be fractional (`500m` is 0.5)
 * @throws RangeError naming the text when it is not a quantity
 * @example parseQuantity('256Mi') // 268435456
 */
export function parseQuantity(text: string | number): number {
  if (typeof text === 'number') {
    if (!Number.isFinite(text)) throw new RangeError(`invalid quantity ${text}`);
    return text;
  }
  const m = QUANTITY.exec(text.trim());
  if (!m) throw new RangeError(`invalid quantity "${text}": expected a number with an optional suffix (Ki, Mi, Gi, k, M, G, m), as in "256Mi"`);
  const n = Number(m[1]);
  if (m[2]) return n * 10 ** Number(m[2].slice(1));
  return n * SUFFIX[m[3] ?? '']!;
}

/**
 * Parses a byte quantity into a whole number of bytes (rounded up, as Kubernetes rounds memory).
 * @throws RangeError when the text is not a quantity or is negative
 */
export function parseBytes(text: string | number): number {
  const v = parseQuantity(text);
  if (v < 0) throw new RangeError(`invalid byte quantity "${text}": negative`);
  return Math.ceil(v);
}

/**
 * Formats bytes with the largest binary suffix that divides them exactly, as kubectl prints
 * memory (`64Ki`, `256Mi`, `1536Ki`), else the number of bytes.
 */
export function formatBytes(bytes: number): string {
  for (const s of ['Ei', 'Pi', 'Ti', 'Gi', 'Mi', 'Ki'] as const) {
    const unit = SUFFIX[s]!;
    if (bytes >= unit && bytes % unit === 0) return `${bytes / unit}${s}`;
  }
  return String(bytes);
}
