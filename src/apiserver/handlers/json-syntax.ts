/**
 * The syntax error Go's `encoding/json` reports for a text that is not JSON, word for word, so that a
 * body kube-apiserver would refuse with `couldn't get version/kind; json parse error: invalid character
 * 'x' looking for beginning of value` is refused here with the same words rather than JavaScript's
 * (`Unexpected token 'x', "xyz" is not valid JSON`). A transcription of the states of Go's scanner
 * (src/encoding/json/scanner.go, which `checkValid` runs before any decoding), over the bytes.
 */

/** What the scanner reads next inside an object or array (Go's parseObjectKey, parseObjectValue, parseArrayValue). */
const Parse = { ObjectKey: 0, ObjectValue: 1, ArrayValue: 2 } as const;
type Parse = (typeof Parse)[keyof typeof Parse];

type Step = (c: number) => void;

/** The characters `strconv.Quote` writes with a letter escape. */
const NAMED_ESCAPES: Readonly<Record<string, string>> = { '\x07': '\\a', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\v': '\\v', '\\': '\\\\' };

/** `'` + the byte as Go's `quoteChar` writes it (`strconv.Quote` of the rune of that byte) + `'`. */
export function goQuoteChar(c: number): string {
  if (c === 0x27) return `'\\''`;
  if (c === 0x22) return `'"'`;
  const named = NAMED_ESCAPES[String.fromCharCode(c)];
  if (named !== undefined) return `'${named}'`;
  if (c < 0x20 || c === 0x7f) return `'\\x${c.toString(16).padStart(2, '0')}'`;
  // U+0080–U+009F are controls, U+00A0 a space and U+00AD a format character: not printable for strconv.
  if ((c >= 0x80 && c <= 0xa0) || c === 0xad) return `'\\u${c.toString(16).padStart(4, '0')}'`;
  return `'${String.fromCharCode(c)}'`;
}

const isSpace = (c: number) => c === 0x20 || c === 0x09 || c === 0x0d || c === 0x0a;
const isDigit = (c: number) => c >= 0x30 && c <= 0x39;
const isHex = (c: number) => isDigit(c) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46);

/**
 * Go's `encoding/json` syntax error for `data` (e.g. `invalid character 'x' looking for beginning of
 * value`, `unexpected end of JSON input`), or undefined when `data` is valid JSON. Nesting is not
 * bounded here (the caller bounds it before).
 */
export function goJsonSyntaxError(data: Uint8Array): string | undefined {
  const stack: Parse[] = [];
  let err: string | undefined;
  let endTop = false;
  let step: Step;
  const fail = (c: number, context: string) => {
    err ??= `invalid character ${goQuoteChar(c)} ${context}`;
  };
  const literal = (expect: number, then: () => Step, context: string): Step => (c) => {
    if (c === expect) step = then();
    else fail(c, context);
  };
  const endValue: Step = (c) => {
    const n = stack.length;
    if (n === 0) {
      step = endTopStep;
      endTop = true;
      endTopStep(c);
      return;
    }
    if (isSpace(c)) {
      step = endValue;
      return;
    }
    switch (stack[n - 1]) {
      case Parse.ObjectKey:
        if (c === 0x3a) {
          stack[n - 1] = Parse.ObjectValue;
          step = beginValue;
        } else fail(c, 'after object key');
        return;
      case Parse.ObjectValue:
        if (c === 0x2c) {
          stack[n - 1] = Parse.ObjectKey;
          step = beginString;
        } else if (c === 0x7d) pop();
        else fail(c, 'after object key:value pair');
        return;
      default:
        if (c === 0x2c) step = beginValue;
        else if (c === 0x5d) pop();
        else fail(c, 'after array element');
    }
  };
  const pop = () => {
    stack.pop();
    if (stack.length === 0) {
      step = endTopStep;
      endTop = true;
    } else step = endValue;
  };
  const endTopStep: Step = (c) => {
    if (!isSpace(c)) fail(c, 'after top-level value');
  };
  const inString: Step = (c) => {
    if (c === 0x22) step = endValue;
    else if (c === 0x5c) step = inStringEsc;
    else if (c < 0x20) fail(c, 'in string literal');
  };
  const inStringEsc: Step = (c) => {
    if ([0x62, 0x66, 0x6e, 0x72, 0x74, 0x5c, 0x2f, 0x22].includes(c)) step = inString;
    else if (c === 0x75) step = hex(4);
    else fail(c, 'in string escape code');
  };
  const hex =
    (left: number): Step =>
    (c) => {
      if (isHex(c)) step = left === 1 ? inString : hex(left - 1);
      else fail(c, 'in \\u hexadecimal character escape');
    };
  const neg: Step = (c) => {
    if (c === 0x30) step = zero;
    else if (c >= 0x31 && c <= 0x39) step = one;
    else fail(c, 'in numeric literal');
  };
  const one: Step = (c) => {
    if (isDigit(c)) step = one;
    else zero(c);
  };
  const zero: Step = (c) => {
    if (c === 0x2e) step = dot;
    else if (c === 0x65 || c === 0x45) step = exp;
    else endValue(c);
  };
  const dot: Step = (c) => {
    if (isDigit(c)) step = dot0;
    else fail(c, 'after decimal point in numeric literal');
  };
  const dot0: Step = (c) => {
    if (c === 0x65 || c === 0x45) step = exp;
    else if (!isDigit(c)) endValue(c);
  };
  const exp: Step = (c) => {
    if (c === 0x2b || c === 0x2d) step = expSign;
    else expSign(c);
  };
  const expSign: Step = (c) => {
    if (isDigit(c)) step = exp0;
    else fail(c, 'in exponent of numeric literal');
  };
  const exp0: Step = (c) => {
    if (!isDigit(c)) endValue(c);
  };
  /** `true`, `false`, `null` after their first letter, each letter as Go expects it. */
  const word = (rest: string, name: string): Step => {
    let next: () => Step = () => endValue;
    for (let i = rest.length - 1; i >= 0; i--) {
      const after = next;
      const ch = rest.charCodeAt(i);
      next = () => literal(ch, after, `in literal ${name} (expecting '${rest[i]}')`);
    }
    return next();
  };
  const beginValue: Step = (c) => {
    if (isSpace(c)) return;
    switch (c) {
      case 0x7b:
        step = beginStringOrEmpty;
        stack.push(Parse.ObjectKey);
        return;
      case 0x5b:
        step = beginValueOrEmpty;
        stack.push(Parse.ArrayValue);
        return;
      case 0x22:
        step = inString;
        return;
      case 0x2d:
        step = neg;
        return;
      case 0x30:
        step = zero;
        return;
      case 0x74:
        step = word('rue', 'true');
        return;
      case 0x66:
        step = word('alse', 'false');
        return;
      case 0x6e:
        step = word('ull', 'null');
        return;
    }
    if (c >= 0x31 && c <= 0x39) step = one;
    else fail(c, 'looking for beginning of value');
  };
  const beginValueOrEmpty: Step = (c) => {
    if (isSpace(c)) return;
    if (c === 0x5d) endValue(c);
    else beginValue(c);
  };
  const beginStringOrEmpty: Step = (c) => {
    if (isSpace(c)) return;
    if (c === 0x7d) {
      stack[stack.length - 1] = Parse.ObjectValue;
      endValue(c);
    } else beginString(c);
  };
  const beginString: Step = (c) => {
    if (isSpace(c)) return;
    if (c === 0x22) step = inString;
    else fail(c, 'looking for beginning of object key string');
  };

  step = beginValue;
  for (const c of data) {
    step(c);
    if (err !== undefined) return err;
  }
  // Go's eof: one more space ends a number at the top level (or fails one cut short, `1.`).
  if (endTop) return undefined;
  step(0x20);
  if (err !== undefined) return err;
  return endTop ? undefined : 'unexpected end of JSON input';
}
