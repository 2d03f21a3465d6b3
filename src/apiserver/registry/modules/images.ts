/**
 * Pod image resolution against the module store: on pod create, an image `wasm://NAME` must name a
 * stored Module (else 422 Invalid) and sets the pod's annotation `kube32.io/image-sha256` to its
 * digest; an image `kube32.io/wasm-sha256:<hex>` sets the same annotation from its digest. A pod
 * runs one module: the kubelet takes that one digest for every container whose image is not a digest,
 * so a pod whose containers (init containers included) name different modules, or a module beside an
 * image that names none, is refused (422 Invalid) rather than run with the wrong module.
 */
import { isBareModuleImage } from '../../../lib/index.ts';
import { invalid } from '../../errors.ts';
import type { KubeObject, Storage } from '../../storage/index.ts';
import { arr, rec, validateSubdomain } from '../util.ts';
import { ANNOTATIONS, DIGEST_IMAGE_PREFIX } from '../../../api/index.ts';

/** The annotation naming the SHA-256 (hex) of a pod's module. */
export const IMAGE_SHA_ANNOTATION = ANNOTATIONS.imageSha256;
const WASM_PREFIX = 'wasm://';
const DIGEST_PREFIX = DIGEST_IMAGE_PREFIX;
const HEX64 = /^[0-9a-f]{64}$/;

/**
 * Resolves the Wasm image of a new pod, in place: `wasm://NAME`, a bare `NAME` of a pushed module,
 * or `kube32.io/wasm-sha256:<hex>` set the pod's `kube32.io/image-sha256` annotation.
 * @throws ApiError Invalid when a `wasm://NAME` is not stored, a digest is malformed, or the pod's
 *   containers do not all name the same module (the annotation holds one digest for all of them)
 */
export async function resolvePodImage(storage: Storage, pod: KubeObject): Promise<void> {
  const spec = rec(pod.spec);
  const containers = [...arr(spec.initContainers).map((c, i) => ({ c, f: `spec.initContainers[${i}].image` })), ...arr(spec.containers).map((c, i) => ({ c, f: `spec.containers[${i}].image` }))];
  const resolved: { image: string; f: string; sha: string | undefined }[] = [];
  for (const { c, f } of containers) {
    const image = typeof c.image === 'string' ? c.image : '';
    resolved.push({ image, f, sha: await imageSha(storage, pod, image, f) });
  }
  const pinned = resolved.find((r) => r.sha !== undefined);
  if (!pinned?.sha) return;
  const other = resolved.find((r) => r.sha !== pinned.sha);
  if (other) {
    throw invalid('Pod', '', pod.metadata.name ?? '', [
      {
        reason: 'FieldValueInvalid',
        message: `Invalid value: ${JSON.stringify(other.image)}: a Kube32 pod runs one module: every container's image must name the module of ${pinned.f} (${JSON.stringify(pinned.image)}, sha256:${pinned.sha.slice(0, 12)}); run the other module in a pod of its own`,
        field: other.f,
      },
    ]);
  }
  pod.metadata.annotations = { ...(pod.metadata.annotations ?? {}), [IMAGE_SHA_ANNOTATION]: pinned.sha };
}

/**
 * The module digest an image names (64 hex digits), or undefined for an image that names no stored
 * module (a bare name nobody pushed, left for the kubelet to refuse or to find once pushed).
 * @throws ApiError Invalid when a `wasm://NAME` is not a module's name or is not stored, or a digest is malformed
 */
async function imageSha(storage: Storage, pod: KubeObject, image: string, f: string): Promise<string | undefined> {
  if (image.startsWith(WASM_PREFIX)) {
    const name = image.slice(WASM_PREFIX.length);
    // A name no module can have (modules are named as kube32-cli push --name takes them) is not "not found":
    // pushing it would be refused too.
    const bad = validateSubdomain(name, f).map((c) => c.message.replace(/^Invalid value: "[^"]*": /, ''));
    if (bad.length > 0) {
      const why = name ? `"${name}" cannot be a module's name: ${bad.join('; ')}` : 'it names no module: want wasm://NAME, NAME the --name of kube32-cli push';
      throw invalid('Pod', '', pod.metadata.name ?? '', [{ reason: 'FieldValueInvalid', message: `Invalid value: "${image}": ${why}`, field: f }]);
    }
    const mod = await storage.get({ resource: 'modules.kube32.io', namespace: '', name });
    const digest = rec(mod?.spec).sha256;
    if (!mod || typeof digest !== 'string') {
      throw invalid('Pod', '', pod.metadata.name ?? '', [{ reason: 'FieldValueNotFound', message: `Not found: "${image}": no module "${name}" is stored (push it with kube32-cli push)`, field: f }]);
    }
    return digest;
  }
  if (image.startsWith(DIGEST_PREFIX)) {
    const hex = image.slice(DIGEST_PREFIX.length).toLowerCase();
    if (!HEX64.test(hex)) throw invalid('Pod', '', pod.metadata.name ?? '', [{ reason: 'FieldValueInvalid', message: `Invalid value: "${image}": the digest must be 64 hex digits`, field: f }]);
    return hex;
  }
  if (isBareModuleImage(image)) {
    // A bare name (`kubectl run c --image=counter`: kubectl refuses `wasm://` in --image) names a
    // pushed module when one has that name; otherwise it is left for the kubelet to refuse.
    const digest = rec((await storage.get({ resource: 'modules.kube32.io', namespace: '', name: image }))?.spec).sha256;
    if (typeof digest === 'string') return digest;
  }
  return undefined;
}
