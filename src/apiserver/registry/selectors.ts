/**
 * Label selectors (`-l`, `labelSelector=`: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a)`, `k`,
 * `!k`) and field selectors (`fieldSelector=`: `f=v`, `f==v`, `f!=v`, comma-joined), as
 * Kubernetes parses them.
 */
import { badRequest } from '../errors.ts';
import { arr, rec } from './util.ts';

/** A compiled label selector. */
export type LabelMatcher = (labels: Record<string, string>) => boolean;

/**
 * Parses a label selector string.
 * @throws ApiError BadRequest naming the selector when it does not parse
 */
export function parseLabelSelector(text: string): LabelMatcher {
  const reqs: LabelMatcher[] = [];
  let i = 0;
  const s = text;
  const fail = (why: string) => badRequest(`unable to parse requirement: ${why} in label selector "${text}"`);
  const ws = () => {
    while (i < s.length && s[i] === ' ') i++;
  };
  const ident = () => {
    ws();
    const m = /^[A-Za-z0-9._\-/]+/.exec(s.slice(i));
    if (!m) throw fail(`expected a key or value at position ${i}`);
    i += m[0].length;
    return m[0];
  };
  const value = () => {
    ws();
    const m = /^[A-Za-z0-9._-]*/.exec(s.slice(i));
    i += m![0].length;
    return m![0];
  };
  while (true) {
    ws();
    if (i >= s.length) break;
    if (s[i] === '!') {
      i++;
      const k = ident();
      reqs.push((l) => !(k in l));
    } else {
      const k = ident();
      ws();
      const rest = s.slice(i);
      if (rest.startsWith('==') || rest.startsWith('=')) {
        i += rest.startsWith('==') ? 2 : 1;
        const v = value();
        reqs.push((l) => l[k] === v);
      } else if (rest.startsWith('!=')) {
        i += 2;
        const v = value();
        reqs.push((l) => l[k] !== v);
      } else if (/^(in|notin)\s*\(/.test(rest)) {
        const neg = rest.startsWith('notin');
        i += neg ? 5 : 2;
        ws();
        i++; // (
        const values = new Set<string>();
        while (true) {
          ws();
          if (s[i] === ')') {
            i++;
            break;
          }
          values.add(value());
          ws();
          if (s[i] === ',') i++;
          else if (s[i] === ')') {
            i++;
            break;
          } else throw fail(`expected ',' or ')' at position ${i}`);
        }
        reqs.push(neg ? (l) => !(k in l) || !values.has(l[k]!) : (l) => k in l && values.has(l[k]!));
      } else if (rest === '' || rest.startsWith(',')) {
        reqs.push((l) => k in l);
      } else {
        throw fail(`found '${rest[0]}', expected: in, notin, =, ==, !=, ',' or end of string`);
      }
    }
    ws();
    if (i < s.length) {
      if (s[i] !== ',') throw fail(`expected ',' at position ${i}`);
      i++;
    }
  }
  return (labels) => reqs.every((r) => r(labels));
}

/**
 * Compiles a `metav1.LabelSelector` object (matchLabels, matchExpressions); an empty selector matches everything.
 * @throws Error naming an unknown operator
 */
export function labelSelectorFromObject(sel: unknown): LabelMatcher {
  const s = rec(sel);
  const reqs: LabelMatcher[] = [];
  for (const [k, v] of Object.entries(rec(s.matchLabels))) reqs.push((l) => l[k] === v);
  for (const e of arr(s.matchExpressions)) {
    const k = String(e.key);
    const values = new Set(Array.isArray(e.values) ? (e.values as string[]) : []);
    switch (e.operator) {
      case 'In':
        reqs.push((l) => k in l && values.has(l[k]!));
        break;
      case 'NotIn':
        reqs.push((l) => !(k in l) || !values.has(l[k]!));
        break;
      case 'Exists':
        reqs.push((l) => k in l);
        break;
      case 'DoesNotExist':
        reqs.push((l) => !(k in l));
        break;
      default:
        throw new Error(`"${String(e.operator)}" is not a valid label selector operator`);
    }
  }
  return (labels) => reqs.every((r) => r(labels));
}

/** One term of a field selector. */
export interface FieldRequirement {
  field: string;
  op: '=' | '!=';
  value: string;
}

/**
 * Parses a field selector string into its terms (`a=b,c!=d`); escapes `\,` `\=` `\\` are honoured.
 * @throws ApiError BadRequest when a term has no operator
 */
export function parseFieldSelector(text: string): FieldRequirement[] {
  const out: FieldRequirement[] = [];
  const terms: string[] = [];
  let cur = '';
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === '\\' && i + 1 < text.length) {
      cur += c + text[++i]!;
    } else if (c === ',') {
      terms.push(cur);
      cur = '';
    } else cur += c;
  }
  terms.push(cur);
  for (const t of terms) {
    if (t.trim() === '') continue;
    const m = /^([^=!]+)(==|=|!=)(.*)$/.exec(t);
    if (!m) throw badRequest(`invalid field selector: '${t}': invalid selector: '${text}'; can't understand '${t}'`);
    out.push({ field: m[1]!.trim(), op: m[2] === '!=' ? '!=' : '=', value: m[3]!.replace(/\\(.)/g, '$1') });
  }
  return out;
}
