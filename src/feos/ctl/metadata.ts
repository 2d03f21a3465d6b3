/**
 * feosctl's `pod create --metadata KEY=VALUE` (repeatable) and `--metadata-file FILE`: the pod's metadata,
 * which its metadata service serves under `/metadata` (seed 000, "Metadata"), checked against the seed's
 * limits before anything is sent (feosd checks them again: INVALID_ARGUMENT). And `--wait`'s last look at
 * a RUNNING pod, which asks feosd for its containers' states.
 */
import { readFileSync } from 'node:fs';
import { InvalidArgumentError } from 'commander';
import YAML from 'yaml';
import { type PodInfo, PodState, type PodSpec } from '../gen/feos/pod/v1/pod_pb.js';

/** A metadata key (seed 000, "Metadata"): 1 to 128 letters, digits, '-', '_' and '.'. */
const KEY = /^[A-Za-z0-9._-]{1,128}$/;
/** The most metadata a pod has, as JSON (bytes). */
export const METADATA_MAX_BYTES = 32 * 1024;

/**
 * Puts the metadata of `--metadata-file` and then of each `--metadata KEY=VALUE` (in order; a later one
 * wins) over the spec's own (`-f`), and checks the whole.
 * @param flags the `--metadata` values, `KEY=VALUE` each (VALUE may hold '=' and be empty)
 * @param file a YAML or JSON mapping of keys to strings
 * @throws InvalidArgumentError (a usage error, exit 1) naming the flag, the file, the key or the size
 */
export function applyMetadata(spec: PodSpec, flags: readonly string[] | undefined, file: string | undefined): void {
  if (file !== undefined) Object.assign(spec.metadata, metadataFromFile(file));
  for (const kv of flags ?? []) {
    const at = kv.indexOf('=');
    if (at < 0) throw new InvalidArgumentError(`--metadata ${JSON.stringify(kv.slice(0, 140))}: want KEY=VALUE`);
    const key = kv.slice(0, at);
    if (!KEY.test(key)) throw new InvalidArgumentError(`--metadata ${JSON.stringify(kv.slice(0, 140))}: key ${JSON.stringify(key.slice(0, 140))}: want 1 to 128 letters, digits, '-', '_' and '.'`);
    spec.metadata[key] = kv.slice(at + 1);
  }
  for (const k of Object.keys(spec.metadata)) {
    if (!KEY.test(k)) throw new InvalidArgumentError(`metadata key ${JSON.stringify(k.slice(0, 140))}: want 1 to 128 letters, digits, '-', '_' and '.'`);
  }
  const size = Buffer.byteLength(JSON.stringify(spec.metadata));
  if (size > METADATA_MAX_BYTES) throw new InvalidArgumentError(`metadata: ${size} bytes as JSON, more than ${METADATA_MAX_BYTES} (32 KiB)`);
}

/**
 * A `--metadata-file`: a YAML or JSON mapping whose values are strings; a plain number or boolean is taken as
 * the text it is written with (`port: 80`, `version: 1.10` and `zip: 01234` stay as written, not as the
 * number YAML reads).
 * @throws InvalidArgumentError naming the file and what is wrong
 */
export function metadataFromFile(file: string): Record<string, string> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err: unknown) {
    throw new InvalidArgumentError(`--metadata-file ${file}: ${err instanceof Error ? err.message : String(err)}`);
  }
  const doc = YAML.parseDocument(text);
  if (doc.errors.length > 0) throw new InvalidArgumentError(`--metadata-file ${file}: not YAML or JSON: ${doc.errors[0]!.message.split('\n')[0]}`);
  const contents = doc.contents;
  if (contents === null || (YAML.isScalar(contents) && contents.value === null)) return {};
  if (!YAML.isMap(contents)) {
    const got = YAML.isSeq(contents) ? 'a list' : JSON.stringify(doc.toJS());
    throw new InvalidArgumentError(`--metadata-file ${file}: want a mapping of keys to strings (such as "role: web"), got ${got}`);
  }
  const out: Record<string, string> = {};
  for (const pair of contents.items) {
    const k = String(YAML.isScalar(pair.key) ? pair.key.value : pair.key);
    const v = pair.value;
    const what = v === null || (YAML.isScalar(v) && v.value === null) ? 'null' : YAML.isSeq(v) ? 'a list' : YAML.isMap(v) ? 'a mapping' : undefined;
    if (what || !YAML.isScalar(v)) throw new InvalidArgumentError(`--metadata-file ${file}: key ${JSON.stringify(k.slice(0, 140))}: want a string value, got ${what ?? typeof v}`);
    out[k] = typeof v.value === 'string' ? v.value : (v.source ?? String(v.value));
  }
  return out;
}

/** How long `withContainerStates` asks again while the pod's bring-up still holds its lock (ms). */
export const STATES_WAIT_MS = 10_000;

/**
 * After `--wait`: a RUNNING pod with containers as GetPod shows it (with the containers' states, which
 * feosd asks its guest for; the watch's events carry none). GetPod gives no states while a change of
 * the pod runs (the bring-up that made it RUNNING lets go of its lock just after): asked again every
 * 200 ms for up to `STATES_WAIT_MS`. Any other pod, or a GetPod that fails, is the pod as it came.
 */
export async function withContainerStates(
  client: { getPod(req: { id: string }, options: { deadline: Date }): Promise<{ pod?: PodInfo }> },
  pod: PodInfo,
  deadline: Date,
): Promise<PodInfo> {
  if (pod.state !== PodState.RUNNING || (pod.spec?.containers.length ?? 0) === 0) return pod;
  const until = Math.min(deadline.getTime(), Date.now() + STATES_WAIT_MS);
  let got = pod;
  for (;;) {
    try {
      got = (await client.getPod({ id: pod.id }, { deadline })).pod ?? got;
    } catch {
      return got;
    }
    if (got.containers.length > 0 || got.guest?.answered || got.state !== PodState.RUNNING || Date.now() >= until) return got;
    await new Promise((r) => setTimeout(r, 200)); // the bring-up's lock is let go of within a moment
  }
}
