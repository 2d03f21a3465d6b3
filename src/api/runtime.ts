/**
 * Which runtime runs a pod, and whether a node's runtime is that one (issue 18 "Bad input"): a Kube32
 * Wasm worker runs Wasm modules; a FeOS node (label `kube32.io/runtime=feos`) runs OCI container images in
 * microVMs. The API server's admission and binding, and the scheduler, refuse a pod on the other kind of
 * node with {@link runtimeMismatch}'s message, which says which runtime runs what.
 *
 * A pod's kind, from what it shows: `microvm` when it names RuntimeClass `feos` or selects FeOS nodes, or
 * when an image is an OCI reference (a registry, a path, a tag or a digest: `busybox:1.36`,
 * `ghcr.io/x/y`); `wasm` when an image is `wasm://NAME`, `kube32.io/wasm-sha256:<hex>`, or the API server
 * resolved it to a pushed module (annotation `kube32.io/image-sha256`); undefined for bare names alone
 * (`nginx`: a module pushed later may have that name; the Wasm kubelet refuses it if none has).
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { isBareModuleImage } from '../lib/index.ts';
import { ANNOTATIONS, DIGEST_IMAGE_PREFIX, LABELS, WASM_IMAGE_PREFIX } from './names.ts';

/** The value of {@link LABELS.runtime} on a FeOS node, the name of its RuntimeClass, and that class's handler. */
export const RUNTIME_FEOS = 'feos';

/** The two kinds of pod. */
export type PodRuntime = 'wasm' | 'microvm';

/** Whether an image names a Wasm module by itself (`wasm://`, `kube32.io/wasm-sha256:`). */
export function isWasmImage(image: string): boolean {
  return image.startsWith(WASM_IMAGE_PREFIX) || image.startsWith(DIGEST_IMAGE_PREFIX);
}

/** The runtime a node runs: `microvm` on a FeOS node, `wasm` on a Wasm worker. */
export function nodeRuntime(node: V1Node): PodRuntime {
  return node.metadata?.labels?.[LABELS.runtime] === RUNTIME_FEOS ? 'microvm' : 'wasm';
}

/** The pod's images, init containers first (a pod not yet validated may hold anything there: '' for what is not one). */
function images(pod: V1Pod): string[] {
  const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
  return [...list(pod.spec?.initContainers), ...list(pod.spec?.containers)].map((c) => {
    const image = c !== null && typeof c === 'object' ? (c as { image?: unknown }).image : undefined;
    return typeof image === 'string' ? image : '';
  });
}

/** The pod's kind with the image that shows it (see the file's comment), or undefined. */
export function podRuntime(pod: V1Pod): { runtime: PodRuntime; image: string } | undefined {
  const all = images(pod);
  const wasm = all.find((i) => isWasmImage(i)) ?? (pod.metadata?.annotations?.[ANNOTATIONS.imageSha256] ? all[0] : undefined);
  if (wasm !== undefined) return { runtime: 'wasm', image: wasm };
  const oci = all.find((i) => i !== '' && !isBareModuleImage(i));
  const selector = pod.spec?.nodeSelector;
  if (pod.spec?.runtimeClassName === RUNTIME_FEOS || (selector !== null && typeof selector === 'object' && selector[LABELS.runtime] === RUNTIME_FEOS)) return { runtime: 'microvm', image: oci ?? all[0] ?? '' };
  if (oci !== undefined) return { runtime: 'microvm', image: oci };
  return undefined;
}

/**
 * Why `pod` cannot run on `node` (named `nodeName`), or undefined when its runtime runs it.
 * @example `node "fleet-a" is a FeOS node: it runs OCI container images in microVMs (runtimeClassName: feos); "wasm://counter" is a Wasm module, which Kube32's Wasm workers run`
 */
export function runtimeMismatch(pod: V1Pod, node: V1Node): string | undefined {
  const kind = podRuntime(pod);
  const runs = nodeRuntime(node);
  if (!kind || kind.runtime === runs) return undefined;
  const name = node.metadata?.name ?? '';
  return runs === 'microvm'
    ? `node "${name}" is a FeOS node: it runs OCI container images in microVMs (runtimeClassName: feos); ${JSON.stringify(kind.image)} is a Wasm module, which Kube32's Wasm workers run`
    : `node "${name}" is a Kube32 Wasm worker: it runs Wasm modules (wasm://NAME); ${JSON.stringify(kind.image)} is an OCI container image, which FeOS nodes run in microVMs (${hasFeosClass(pod) ? 'bind it to a FeOS node' : 'give the pod runtimeClassName: feos'})`;
}

/** Whether the pod already names the RuntimeClass feos (then the way out is another node, not the class). */
function hasFeosClass(pod: V1Pod): boolean {
  return pod.spec?.runtimeClassName === RUNTIME_FEOS;
}

/** The scheduler's reason for a node of the other runtime, node-agnostic (counted over nodes). */
export function runtimeMismatchReason(pod: V1Pod, node: V1Node): string | undefined {
  const kind = podRuntime(pod);
  const runs = nodeRuntime(node);
  if (!kind || kind.runtime === runs) return undefined;
  return runs === 'microvm'
    ? `node(s) were FeOS nodes, which run OCI container images in microVMs, not the Wasm module ${JSON.stringify(kind.image)}`
    : `node(s) were Wasm workers, which run Wasm modules, not the OCI container image ${JSON.stringify(kind.image)}${hasFeosClass(pod) ? '' : ' (runtimeClassName: feos runs it on a FeOS node)'}`;
}
