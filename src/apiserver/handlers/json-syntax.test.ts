// Go's encoding/json syntax errors, transcribed (src/apiserver/handlers/json-syntax.ts): each text and the
// error Go's checkValid gives it, from the states of its scanner.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { goJsonSyntaxError } from './json-syntax.ts';

test("goJsonSyntaxError words each syntax error as Go's encoding/json does, and passes valid JSON", () => {
  const cases: [string, string | undefined][] = [
    ['xyz', "invalid character 'x' looking for beginning of value"],
    ['{"a":1,}', "invalid character '}' looking for beginning of object key string"],
    ['{a:1}', "invalid character 'a' looking for beginning of object key string"],
    ['[1,]', "invalid character ']' looking for beginning of value"],
    ['{"a" 1}', "invalid character '1' after object key"],
    ['{"a":1 "b":2}', `invalid character '"' after object key:value pair`],
    ['[1 2]', "invalid character '2' after array element"],
    ['{} x', "invalid character 'x' after top-level value"],
    ['01', "invalid character '1' after top-level value"],
    ['1.', "invalid character ' ' after decimal point in numeric literal"],
    ['-a', "invalid character 'a' in numeric literal"],
    ['1e+', "invalid character ' ' in exponent of numeric literal"],
    ['tru', "invalid character ' ' in literal true (expecting 'e')"],
    ['nuLL', "invalid character 'L' in literal null (expecting 'l')"],
    ['"a\\q"', "invalid character 'q' in string escape code"],
    ['"\\u12g4"', "invalid character 'g' in \\u hexadecimal character escape"],
    ['"a\nb"', "invalid character '\\n' in string literal"],
    ["'a'", "invalid character '\\'' looking for beginning of value"],
    ['\\', "invalid character '\\\\' looking for beginning of value"],
    ['\x7f', "invalid character '\\x7f' looking for beginning of value"],
    // The first byte of a UTF-8 sequence, as the rune of that byte (0xc3: Ã).
    ['é', "invalid character 'Ã' looking for beginning of value"],
    ['{"a": [1, 2', 'unexpected end of JSON input'],
    ['"abc', 'unexpected end of JSON input'],
    ['', 'unexpected end of JSON input'],
    [' [1, {"a": [true, false, null, -0.5e+10, "\\u00e9\\n"]}] ', undefined],
    ['0', undefined],
  ];
  for (const [text, want] of cases) assert.equal(goJsonSyntaxError(Buffer.from(text)), want, JSON.stringify(text));
});
