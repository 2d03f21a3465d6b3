/**
 * feosctl's flag values and files: whole numbers, memory and volume sizes within their bounds, pull
 * tokens from files, a PodSpec from `-f`. Each bad value is commander's InvalidArgumentError naming the
 * flag (or file) and what to give instead (exit 1).
 */
import { readFileSync } from 'node:fs';
import { InvalidArgumentError } from 'commander';
import { fromJson, type JsonValue } from '@bufbuild/protobuf';
import YAML from 'yaml';
import { PodSpecSchema } from '../gen/feos/pod/v1/pod_pb.js';
import { parseBytes } from '../../lib/index.ts';
import { MAX_MEMORY_BYTES, MIN_MEMORY_BYTES } from '../pods/index.ts';
import { MAX_VOLUME_BYTES, MIN_VOLUME_BYTES } from '../volumes/index.ts';

/**
 * A pull token from a file (trimmed), or empty; a token never goes on a command line, where ps shows it.
 * @throws InvalidArgumentError naming `--pull-token-file` and the file when it cannot be read or is empty
 */
export function readToken(file: string | undefined): string {
  if (!file) return '';
  let t: string;
  try {
    t = readFileSync(file, 'utf8').trim();
  } catch (err: unknown) {
    throw new InvalidArgumentError(`--pull-token-file ${file}: ${err instanceof Error ? err.message.replace(/^(\w+): ([^,]+),.*$/, '$2 ($1)') : String(err)}: give a file that holds the registry's Bearer token`);
  }
  if (!t) throw new InvalidArgumentError(`--pull-token-file ${file}: the file is empty: put the registry's Bearer token in it`);
  return t;
}

/**
 * A flag's whole number from `min` to `max`, for commander: `1.5`, `abc`, `-1` or `99999999999999999999`
 * are usage errors naming the flag and the value.
 */
export function wholeNumber(flag: string, min: number, max: number) {
  return (v: string): number => {
    const n = /^\d+$/.test(v.trim()) ? Number(v) : Number.NaN;
    if (!(n >= min && n <= max)) throw new InvalidArgumentError(`${flag} ${JSON.stringify(v)}: want a whole number from ${min} to ${max}`);
    return n;
  };
}

/** `--memory`'s bytes: a quantity of whole MiB within a pod's bounds (seed 000, "A pod"). */
export function memoryBytes(v: string): bigint {
  let n: number;
  try {
    n = parseBytes(v);
  } catch {
    throw new InvalidArgumentError(`--memory ${JSON.stringify(v)}: want a quantity such as 256Mi or 1Gi`);
  }
  const mib = 1024 * 1024;
  if (!Number.isSafeInteger(n) || BigInt(n) < MIN_MEMORY_BYTES || BigInt(n) > MAX_MEMORY_BYTES || n % mib !== 0) {
    throw new InvalidArgumentError(`--memory ${JSON.stringify(v)}: want whole Mi from ${MIN_MEMORY_BYTES / BigInt(mib)}Mi to ${MAX_MEMORY_BYTES / BigInt(mib)}Mi`);
  }
  return BigInt(n);
}

/** `volume create --size`'s bytes: a quantity of whole MiB within a volume's bounds (seed 000, "Volumes"). */
export function volumeBytes(v: string): bigint {
  let n: number;
  try {
    n = parseBytes(v);
  } catch {
    throw new InvalidArgumentError(`--size ${JSON.stringify(v)}: want a quantity such as 1Gi or 512Mi`);
  }
  const mib = 1024 * 1024;
  if (!Number.isSafeInteger(n) || BigInt(n) < MIN_VOLUME_BYTES || BigInt(n) > MAX_VOLUME_BYTES || n % mib !== 0) {
    throw new InvalidArgumentError(`--size ${JSON.stringify(v)}: want whole Mi from 64Mi to 16Ti`);
  }
  return BigInt(n);
}

/**
 * A PodSpec from a `-f` file's text (YAML or JSON, protobuf JSON names).
 * @throws InvalidArgumentError naming the file and what is wrong: YAML syntax, not a mapping, or the
 *   field protobuf JSON cannot take
 */
export function specFromFile(file: string, text: string) {
  let doc: unknown;
  try {
    doc = YAML.parse(text);
  } catch (err: unknown) {
    throw new InvalidArgumentError(`${file}: not YAML or JSON: ${(err instanceof Error ? err.message : String(err)).split('\n')[0]}`);
  }
  if (doc === null || doc === undefined) throw new InvalidArgumentError(`${file}: empty: want a PodSpec (a mapping such as "vcpus: 1")`);
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    throw new InvalidArgumentError(`${file}: want a PodSpec, a mapping such as "vcpus: 1", got ${Array.isArray(doc) ? 'a list' : JSON.stringify(doc)}`);
  }
  try {
    return fromJson(PodSpecSchema, doc as JsonValue);
  } catch (err: unknown) {
    // protobuf-es names the field and the value: `cannot decode field feos.pod.v1.PodSpec.vcpus from JSON: "two"`.
    const msg = (err instanceof Error ? err.message : String(err)).replace(/^cannot decode message feos\.pod\.v1\.PodSpec from JSON: /, '');
    throw new InvalidArgumentError(`${file}: not a PodSpec: ${msg} (fields: vcpus, memoryBytes, containers, network, volumes, metadata...; protobuf JSON names)`);
  }
}
