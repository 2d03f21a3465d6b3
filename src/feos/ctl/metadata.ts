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
 * @throws InvalidArgumentError (a usage error, exit 2) naming the flag, the file, the key or the size
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
 * A `--metadata-file`: a YAML or JSON mapping whose values are strings (numbers and booleans are
 * taken as their text, as YAML writes `port: 80`).
 * @throws InvalidArgumentError naming the file and what is wrong
 */
export function metadataFromFile(file: string): Record<string, string> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err: unknown) {
    throw new InvalidArgumentError(`--metadata-file ${file}: ${err instanceof Error ? err.message : String(err)}`);
  }
  let doc: unknown;
  try {
    doc = YAML.parse(text);
  } catch (err: unknown) {
    throw new InvalidArgumentError(`--metadata-file ${file}: not YAML or JSON: ${(err instanceof Error ? err.message : String(err)).split('\n')[0]}`);
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    throw new InvalidArgumentError(`--metadata-file ${file}: want a mapping of keys to strings (such as "role: web"), got ${Array.isArray(doc) ? 'a list' : JSON.stringify(doc)}`);
  }
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(doc as Record<string, unknown>)) {
    if (typeof v === 'string') out[k] = v;
    else if (typeof v === 'number' || typeof v === 'boolean') out[k] = String(v);
    else throw new InvalidArgumentError(`--metadata-file ${file}: key ${JSON.stringify(k.slice(0, 140))}: want a string value, got ${v === null ? 'null' : Array.isArray(v) ? 'a list' : typeof v}`);
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
