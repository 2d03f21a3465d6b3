/**
 * A PodSpec's checks and defaults (seed 000, "A pod", "Volumes", "Metadata"). `normalizeSpec` fills the
 * defaults so that a create compares specs as they are kept.
 */
import { isIP } from 'node:net';
import { clone, create } from '@bufbuild/protobuf';
import { type PodSpec, PodSpecSchema } from '../gen/feos/pod/v1/pod_pb.js';
import { errorMessage, FeosError } from '../api/index.ts';
import { parseImageRef } from '../guest/index.ts';

const MIB = 1024n * 1024n;
/** Default memory of a pod: 256 MiB. */
export const DEFAULT_MEMORY_BYTES = 256n * MIB;
/**
 * The least memory a pod boots in: the guest's kernel, its initramfs and the agent (Node.js) need it.
 * Measured with the guest of scripts/build-guest.sh under TCG: at 128 MiB the kernel kills the agent
 * for lack of memory at every start and the guest never attaches; 160 MiB crawls; 176 MiB boots.
 */
export const MIN_MEMORY_BYTES = 192n * MIB;
export const MAX_MEMORY_BYTES = 64n * 1024n * MIB;
export const MAX_VCPUS = 32;
export const MAX_VOLUMES = 8;
const NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const METADATA_KEY = /^[A-Za-z0-9._-]{1,128}$/;
/** A security group's or name table's ID (feos.network.v1). */
const RECORD_ID = /^[a-z][a-z0-9-]{0,62}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function bad(msg: string): FeosError {
  return new FeosError('INVALID_ARGUMENT', `spec: ${msg}`);
}

/**
 * Checks a spec and returns it with its defaults (1 vCPU, 256 MiB).
 * @throws FeosError INVALID_ARGUMENT naming the field and the value
 */
export function normalizeSpec(input: PodSpec | undefined): PodSpec {
  const spec = input ? clone(PodSpecSchema, input) : create(PodSpecSchema);
  if (spec.vcpus === 0) spec.vcpus = 1;
  if (spec.memoryBytes === 0n) spec.memoryBytes = DEFAULT_MEMORY_BYTES;
  if (spec.vcpus > MAX_VCPUS) throw bad(`vcpus ${spec.vcpus}: want 1 to ${MAX_VCPUS}`);
  if (spec.memoryBytes % MIB !== 0n) throw bad(`memory_bytes ${spec.memoryBytes}: want whole MiB`);
  if (spec.memoryBytes < MIN_MEMORY_BYTES || spec.memoryBytes > MAX_MEMORY_BYTES) {
    throw bad(`memory_bytes ${spec.memoryBytes}: want ${MIN_MEMORY_BYTES / MIB} MiB to ${MAX_MEMORY_BYTES / MIB / 1024n} GiB`);
  }
  const names = new Set<string>();
  for (const [i, c] of spec.containers.entries()) {
    if (!NAME.test(c.name)) throw bad(`containers[${i}].name ${JSON.stringify(c.name)}: want 1 to 63 lowercase letters, digits and '-'`);
    if (names.has(c.name)) throw bad(`containers[${i}].name ${c.name}: used twice`);
    names.add(c.name);
    if (!c.image) throw bad(`containers[${i}].image: empty`);
    // As the guest will parse it (Docker's rules): a bad reference would fail only after a whole boot.
    try {
      parseImageRef(c.image);
    } catch (err: unknown) {
      throw bad(`containers[${i}].image: ${errorMessage(err).replace(/^image /, '')}`);
    }
    for (const m of c.volumeMounts) {
      if (!spec.volumes.some((v) => v.name === m.name)) throw bad(`containers[${i}].volume_mounts: no volume ${JSON.stringify(m.name)}`);
      if (!m.path.startsWith('/')) throw bad(`containers[${i}].volume_mounts: path ${JSON.stringify(m.path)} is not absolute`);
    }
  }
  if (spec.volumes.length > MAX_VOLUMES) throw bad(`volumes: ${spec.volumes.length}, at most ${MAX_VOLUMES}`);
  const vnames = new Set<string>();
  // A volume is one disk: attached twice, QEMU's image lock refuses the second drive at bring-up.
  const byId = new Map<string, string>();
  for (const [i, v] of spec.volumes.entries()) {
    if (!NAME.test(v.name)) throw bad(`volumes[${i}].name ${JSON.stringify(v.name)}: want 1 to 63 lowercase letters, digits and '-'`);
    if (vnames.has(v.name)) throw bad(`volumes[${i}].name ${v.name}: used twice`);
    vnames.add(v.name);
    if (!UUID.test(v.volumeId)) throw bad(`volumes[${i}].volume_id ${JSON.stringify(v.volumeId)}: want a lowercase UUID`);
    const other = byId.get(v.volumeId);
    if (other !== undefined) throw bad(`volumes[${i}]: volume ${v.volumeId} is listed twice, as ${other} and ${v.name}: a volume attaches once`);
    byId.set(v.volumeId, v.name);
  }
  for (const k of Object.keys(spec.metadata)) {
    if (!METADATA_KEY.test(k)) throw bad(`metadata key ${JSON.stringify(k)}: want 1 to 128 letters, digits, '-', '_' and '.'`);
  }
  if (Buffer.byteLength(JSON.stringify(spec.metadata)) > 32 * 1024) throw bad('metadata: more than 32 KiB as JSON');
  if (spec.network) {
    // The IDs the network's stores take (src/feos/network/stores.ts): a group or table that could never
    // be put would fail every bring-up with "not on the node".
    for (const [field, ids] of [['security_groups', spec.network.securityGroups], ['name_tables', spec.network.nameTables]] as const) {
      for (const [i, g] of ids.entries()) {
        if (!RECORD_ID.test(g)) throw bad(`network.${field}[${i}] ${JSON.stringify(g)}: want 1 to 63 lowercase letters, digits and '-', a letter first`);
      }
    }
    for (const u of spec.network.dnsUpstreams) {
      if (isIP(u) === 0) throw bad(`network.dns_upstreams ${JSON.stringify(u)}: not an IP address`);
    }
  }
  return spec;
}
