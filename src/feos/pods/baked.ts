/**
 * Baked images (seed 000, "A pod": Baked images, Pull tokens; docs/feos/baked-images.md). A create may
 * name, beside its spec, the image of the pod's one container, layers baked of it and whether the pod
 * may bake it (`ImageLayers`, kept in the record, never compared). The pod's new disk starts on the first
 * of those layers made for its guest version whose manifest and layer the node has or fetches from the
 * object store; one it cannot fetch is passed over; with none, on the blank data volume. A pod on the
 * blank data volume that may bake does so at its bake point (after its volumes mount, before its first
 * container): the guest pulls the image, its data volume is frozen, the disk's top is sealed as a layer
 * (a copy of the pod's qcow2, content-addressed by its SHA-256), the volume is thawed, and the layer goes
 * to the object store in the background (three tries); once there, the record names it (`baked`).
 *
 * Here there is no diskd: a layer is a qcow2 whose backing file is the guest version's blank data volume
 * (`data.qcow2`), and a disk made on a layer is a copy of it (a reflink where the file system can), so
 * that every pod's disk stays one qcow2 over `data.qcow2`, as hibernation and restore take it
 * (docs/feos/departures.md).
 *
 * Layout, locally `<state-dir>/layers/<layer>/` and in the store `layers/<layer>/`: `layer.qcow2` and
 * `manifest.json` (LayerManifest; in the store it is written last, so that a layer half put is never
 * taken).
 */
import { createHash } from 'node:crypto';
import { constants, createReadStream, existsSync } from 'node:fs';
import { copyFile, mkdir, open, readdir, readFile, rename, rm } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { type ImageLayers, ImageLayersSchema, type PodInfo, type PodSpec } from '../gen/feos/pod/v1/pod_pb.js';
import { writeFileAtomic } from '../../lib/index.ts';
import { errorMessage, FeosError } from '../api/index.ts';
import { GrpcCode, GrpcError } from '../guest/index.ts';
import { ObjectNotFoundError, storeFailureCode } from '../store/index.ts';
import { fetchVerified } from './checkpoint.ts';
import type { PodCore } from './core.ts';
import { CONTAINER_CREATE_MS, GUEST_CALL_MS } from './actions.ts';

const run = promisify(execFile);

/** The layer manifest's format. */
export const LAYER_MANIFEST_VERSION = 1;
/** At most this many layers in a create's ImageLayers. */
export const MAX_IMAGE_LAYERS = 16;
/** How many times a layer's upload is tried. */
export const LAYER_PUSH_TRIES = 3;
/** How long a freeze or a thaw of the data volume may take (ms). */
const FREEZE_MS = 60_000;
const LAYER_ID = /^[0-9a-f]{64}$/;

/** What a baked layer is made of and for: `manifest.json` beside `layer.qcow2`. */
export interface LayerManifest {
  version: number;
  /** The layer's ID: the SHA-256 of `layer.qcow2`, hex. */
  layer: string;
  /** The guest version whose blank data volume (`data.qcow2`) the layer is on. */
  guestVersion: string;
  /** The image reference the pod pulled. */
  image: string;
  /** Its linux/amd64 manifest's digest, `sha256:<hex>`. */
  imageDigest: string;
  /** `layer.qcow2`'s size in bytes and SHA-256 (= `layer`). */
  sizeBytes: number;
  sha256: string;
  /** The pod that baked it, and when (ISO 8601). */
  bakedBy: string;
  bakedAt: string;
}

/** The store's key of a layer's file: `layers/<layer>/layer.qcow2`; its manifest's is `.../manifest.json`. */
export function layerKey(layer: string, file: 'layer.qcow2' | 'manifest.json'): string {
  return `layers/${layer}/${file}`;
}

/** `<state-dir>/layers/<layer>/`, this node's copy of a layer. */
export function localLayerDir(core: PodCore, layer: string): string {
  return join(core.o.records.dir, '..', 'layers', layer);
}

/**
 * Checks a create's ImageLayers against its spec: the image is the pod's one container's, each layer an
 * ID, at most MAX_IMAGE_LAYERS. Returns it as kept (undefined when the create named none).
 * @throws FeosError INVALID_ARGUMENT naming the field and what to fix
 */
export function checkImageLayers(il: ImageLayers | undefined, spec: PodSpec): ImageLayers | undefined {
  if (!il || (il.image === '' && il.layers.length === 0 && !il.bake)) return undefined;
  const bad = (msg: string) => new FeosError('INVALID_ARGUMENT', `image_layers: ${msg}`);
  if (spec.containers.length !== 1) throw bad(`the pod must have one container (it has ${spec.containers.length}): a baked layer holds the image of a pod's one container`);
  const image = spec.containers[0].image;
  if (il.image === '') throw bad(`image: empty; want the pod's container's image ${JSON.stringify(image)}`);
  if (il.image !== image) throw bad(`image ${JSON.stringify(il.image)} is not the pod's container's image ${JSON.stringify(image)}`);
  if (il.layers.length > MAX_IMAGE_LAYERS) throw bad(`${il.layers.length} layers: at most ${MAX_IMAGE_LAYERS}`);
  for (const l of il.layers) if (!LAYER_ID.test(l)) throw bad(`layer ${JSON.stringify(l)}: want a layer ID, 64 lowercase hex digits (a pod's "baked")`);
  return create(ImageLayersSchema, { image: il.image, layers: [...il.layers], bake: il.bake });
}

/**
 * Parses and checks a layer manifest.
 * @throws Error saying what is wrong
 */
export function parseLayerManifest(bytes: Uint8Array, layer: string): LayerManifest {
  const m = JSON.parse(Buffer.from(bytes).toString('utf8')) as LayerManifest;
  if (typeof m !== 'object' || m === null) throw new Error('its manifest is not an object');
  if (m.version !== LAYER_MANIFEST_VERSION) throw new Error(`its manifest's version ${JSON.stringify(m.version)} is not ${LAYER_MANIFEST_VERSION}`);
  if (m.layer !== layer || m.sha256 !== layer) throw new Error(`its manifest names layer ${JSON.stringify(m.layer)}`);
  if (typeof m.guestVersion !== 'string' || typeof m.image !== 'string' || !Number.isSafeInteger(m.sizeBytes)) throw new Error('its manifest lacks the guest version, the image or the size');
  return m;
}

/**
 * The layer on this node: its manifest, from `<state-dir>/layers/<layer>/` or else fetched from the
 * object store (the manifest, then the layer, checked against the manifest's size and SHA-256; a copy
 * that differs is removed, and the store's objects are left as they are, for their operator).
 * @throws FeosError saying why it is not to be had: NOT_FOUND (no object store, or no manifest in it),
 *   DATA_LOSS naming the object (a manifest that does not read, a layer whose bytes differ from the
 *   manifest's size and SHA-256, a layer missing beside its manifest), UNAVAILABLE or FAILED_PRECONDITION
 *   (the store failed or refused; the node's state dir failed)
 */
async function haveLayer(core: PodCore, layer: string, podId: string): Promise<LayerManifest> {
  const dir = localLayerDir(core, layer);
  if (existsSync(join(dir, 'layer.qcow2')) && existsSync(join(dir, 'manifest.json'))) {
    try {
      return parseLayerManifest(await readFile(join(dir, 'manifest.json')), layer);
    } catch (err: unknown) {
      throw new FeosError('DATA_LOSS', `layer ${layer}: this node's ${join(dir, 'manifest.json')}: ${errorMessage(err)}`);
    }
  }
  const store = core.o.objectStore;
  if (!store) throw new FeosError('NOT_FOUND', `layer ${layer}: the node does not have it and feosd has no object store (--object-store)`);
  const mkey = layerKey(layer, 'manifest.json');
  let bytes: Uint8Array;
  try {
    bytes = await store.getBytes(mkey);
  } catch (err: unknown) {
    if (err instanceof ObjectNotFoundError) throw new FeosError('NOT_FOUND', `layer ${layer}: the object store ${store.url} has no ${mkey}`);
    throw new FeosError(storeFailureCode(err), `layer ${layer}: object store ${store.url}: ${errorMessage(err)}`, { cause: err });
  }
  let m: LayerManifest;
  try {
    m = parseLayerManifest(bytes, layer);
  } catch (err: unknown) {
    throw new FeosError('DATA_LOSS', `layer ${layer}: ${mkey} in the object store ${store.url} does not read: ${errorMessage(err)}`);
  }
  await mkdir(dir, { recursive: true });
  // The pod's own: two pods' bring-ups may fetch one layer at once.
  const tmp = join(dir, `.layer.qcow2.${podId}.fetch`);
  // DATA_LOSS "layer L in URL: layers/L/layer.qcow2 is N bytes with SHA-256 X; its manifest says ...", the copy removed.
  await fetchVerified(store, { key: layerKey(layer, 'layer.qcow2'), sizeBytes: m.sizeBytes, sha256: m.sha256 }, tmp, `layer ${layer} in ${store.url}`, undefined, undefined, 'the layer is not used');
  await rename(tmp, join(dir, 'layer.qcow2'));
  await writeFileAtomic(join(dir, 'manifest.json'), JSON.stringify(m, null, 2));
  core.log.info({ layer, from: store.url }, 'layer fetched');
  return m;
}

/** Why a layer was passed over, as `PodInfo.disk.passed_over` keeps it: "<layer>: <code>: <message>". */
function passedOver(layer: string, err: unknown): string {
  const code = err instanceof FeosError ? err.code : 'FAILED_PRECONDITION';
  const msg = errorMessage(err);
  return `${layer}: ${code}: ${msg.startsWith(`layer ${layer}`) ? msg : `layer ${layer}: ${msg}`}`;
}

/**
 * Makes the pod's new disk (at `tmp`): on the first of its ImageLayers' layers made for its guest version
 * (and its image) that the node has or fetches, else on the blank data volume (seed "Baked images": one it
 * cannot fetch is passed over). Each one passed over is logged with its status and kept in what the call
 * returns: a layer whose bytes differ from its manifest is DATA_LOSS naming the object, and the pod's
 * image is pulled as without the layer.
 * @returns the layer the disk was made on ('' for the blank data volume) and the layers passed over, each
 *   "<layer>: <code>: <why>" (`DiskOrigin.passed_over`)
 */
export async function makePodDisk(core: PodCore, pod: PodInfo, tmp: string): Promise<{ layer: string; passedOver: string[] }> {
  const data = join(core.o.guestDir, pod.guestVersion, 'data.qcow2');
  const over: string[] = [];
  for (const layer of pod.imageLayers?.layers ?? []) {
    let m: LayerManifest;
    try {
      m = await haveLayer(core, layer, pod.id);
      if (m.guestVersion !== pod.guestVersion) throw new FeosError('FAILED_PRECONDITION', `layer ${layer}: it was made for guest version ${m.guestVersion}, the pod boots ${pod.guestVersion}`);
      if (m.image !== pod.imageLayers!.image) throw new FeosError('FAILED_PRECONDITION', `layer ${layer}: it holds image ${m.image}, not ${pod.imageLayers!.image}`);
    } catch (err: unknown) {
      const why = passedOver(layer, err);
      over.push(why);
      core.log.warn({ id: pod.id, layer, code: err instanceof FeosError ? err.code : undefined, err: why }, 'layer passed over');
      continue;
    }
    // A copy of the layer (a reflink where the file system can), on this node's blank data volume.
    await copyFile(join(localLayerDir(core, layer), 'layer.qcow2'), tmp, constants.COPYFILE_FICLONE);
    await run('qemu-img', ['rebase', '-u', '-F', 'qcow2', '-b', data, tmp]);
    core.log.info({ id: pod.id, layer, image: m.image }, 'disk made on a baked layer');
    return { layer, passedOver: over };
  }
  await run('qemu-img', ['create', '-q', '-f', 'qcow2', '-F', 'qcow2', '-b', data, tmp]);
  return { layer: '', passedOver: over };
}

/**
 * The bake point, after the volumes mount and before the first container (see the file's comment).
 * Does nothing unless the pod may bake, its disk is on the blank data volume, it baked nothing yet, there
 * is an object store and the guest does not have the container already. A pull, freeze or seal that
 * fails (and a guest that cannot freeze) is logged and leaves the bring-up as it would have been.
 * @param pull the pull's token and registry endpoints
 * @throws Error "the data volume stays frozen: ..." when the thaw fails (the bring-up fails)
 */
export async function bakePoint(core: PodCore, pod: PodInfo, pull: { pullToken: string; registryEndpoints: Record<string, string> }): Promise<void> {
  const o = core.o;
  const il = pod.imageLayers;
  if (!il?.bake || pod.disk?.layer || pod.baked) return;
  const guest = o.vms.guest(pod.id);
  const log = (msg: string, err?: unknown) => core.log.warn({ id: pod.id, image: il.image, err: err === undefined ? undefined : errorMessage(err) }, `bake: ${msg}`);
  // A freeze that a restart of feosd cut off is thawed first, whatever comes next.
  if (!(await thaw(core, pod, true))) return log('the guest cannot freeze its data volume (an older guest): not baked');
  if (!o.objectStore) return log('feosd has no object store (--object-store): not baked');
  const name = pod.spec!.containers[0]?.name;
  try {
    const had = await guest.call('ListContainers', {}, GUEST_CALL_MS);
    if (had.containers.some((c) => c.name === name)) return;
  } catch (err: unknown) {
    return log('the guest did not list its containers: not baked', err);
  }
  let digest: string;
  try {
    const res = await guest.call('PullImage', { image: il.image, pullToken: pull.pullToken, registryEndpoints: pull.registryEndpoints }, CONTAINER_CREATE_MS);
    digest = res.manifestDigest;
  } catch (err: unknown) {
    return log('the pull failed: not baked', err);
  }
  let sealed: LayerManifest | undefined;
  try {
    await guest.call('FreezeFilesystem', { trim: true }, FREEZE_MS * 3);
    sealed = await sealLayer(core, pod, digest);
  } catch (err: unknown) {
    log('the freeze or the seal failed: not baked', err);
  } finally {
    await thaw(core, pod, false);
  }
  if (!sealed) return;
  core.log.info({ id: pod.id, layer: sealed.layer, image: il.image, sizeBytes: sealed.sizeBytes }, 'bake: layer sealed');
  void pushLayer(core, pod.id, sealed);
}

/**
 * Thaws the pod's data volume (three tries). Returns false when the guest does not know the call (an
 * older guest, which cannot freeze).
 * @param leftover this thaw looks for a freeze that a restart cut off (logged when it finds one)
 * @throws Error "the data volume stays frozen: ..." when it fails otherwise
 */
async function thaw(core: PodCore, pod: PodInfo, leftover: boolean): Promise<boolean> {
  const guest = core.o.vms.guest(pod.id);
  let last: unknown;
  for (let i = 0; i < 3; i++) {
    try {
      const res = await guest.call('ThawFilesystem', {}, FREEZE_MS);
      if (res.wasFrozen && leftover) core.log.warn({ id: pod.id }, 'bake: a freeze a restart cut off was thawed');
      return true;
    } catch (err: unknown) {
      if (err instanceof GrpcError && err.code === GrpcCode.UNIMPLEMENTED) return false;
      last = err;
    }
  }
  throw new Error(`the data volume stays frozen: ${errorMessage(last)}`);
}

/**
 * Seals the pod's disk as a layer while its data volume is frozen (the guest's freeze flushed it, so the
 * qcow2 QEMU writes is whole on the node): `qemu-img convert -U` of `<disks>/<id>.qcow2` over the guest's
 * `data.qcow2` (`-B`: the clusters the pod wrote, compacted; the trimmed ones as zeros), fsynced and
 * hashed, kept as `<state-dir>/layers/<sha256>/layer.qcow2` beside its manifest.
 */
async function sealLayer(core: PodCore, pod: PodInfo, imageDigest: string): Promise<LayerManifest> {
  const layersDir = join(core.o.records.dir, '..', 'layers');
  await mkdir(layersDir, { recursive: true });
  const tmp = join(layersDir, `.${pod.id}.sealing`);
  const data = join(core.o.guestDir, pod.guestVersion, 'data.qcow2');
  let layer: string;
  let size = 0;
  try {
    await rm(tmp, { force: true });
    // -U: QEMU holds the disk's lock; the frozen volume writes nothing while it is read.
    await run('qemu-img', ['convert', '-U', '-q', '-f', 'qcow2', '-O', 'qcow2', '-B', data, '-F', 'qcow2', join(core.o.disksDir, `${pod.id}.qcow2`), tmp]);
    const hash = createHash('sha256');
    for await (const chunk of createReadStream(tmp, { highWaterMark: 1 << 20 })) {
      hash.update(chunk as Buffer);
      size += (chunk as Buffer).byteLength;
    }
    const fh = await open(tmp, 'r+');
    await fh.sync().finally(() => fh.close());
    layer = hash.digest('hex');
  } catch (err: unknown) {
    await rm(tmp, { force: true });
    throw err;
  }
  const m: LayerManifest = {
    version: LAYER_MANIFEST_VERSION,
    layer,
    guestVersion: pod.guestVersion,
    image: pod.imageLayers!.image,
    imageDigest,
    sizeBytes: size,
    sha256: layer,
    bakedBy: pod.id,
    bakedAt: new Date().toISOString(),
  };
  const dir = localLayerDir(core, layer);
  await mkdir(dir, { recursive: true });
  await rename(tmp, join(dir, 'layer.qcow2'));
  await writeFileAtomic(join(dir, 'manifest.json'), JSON.stringify(m, null, 2));
  return m;
}

/**
 * Puts a sealed layer into the object store (the layer, checked against its SHA-256, then its manifest),
 * LAYER_PUSH_TRIES tries a second apart and more; once it is there, the pod's record names it (`baked`),
 * and the pod's event says so. A pod gone meanwhile leaves the layer in the store. Never throws.
 */
export async function pushLayer(core: PodCore, id: string, m: LayerManifest): Promise<void> {
  const store = core.o.objectStore!;
  const dir = localLayerDir(core, m.layer);
  for (let attempt = 1; ; attempt++) {
    try {
      const put = await store.put(layerKey(m.layer, 'layer.qcow2'), createReadStream(join(dir, 'layer.qcow2'), { highWaterMark: 1 << 20 }));
      if (put.sha256 !== m.sha256 || put.sizeBytes !== m.sizeBytes) throw new Error(`the store took ${put.sizeBytes} bytes with SHA-256 ${put.sha256}; the layer is ${m.sizeBytes} bytes with ${m.sha256}`);
      await store.put(layerKey(m.layer, 'manifest.json'), new TextEncoder().encode(JSON.stringify(m, null, 2)));
      break;
    } catch (err: unknown) {
      core.log.warn({ id, layer: m.layer, attempt, err: errorMessage(err) }, 'bake: the layer was not put into the object store');
      if (attempt >= LAYER_PUSH_TRIES) return;
      // A backoff between tries of a store that failed.
      await new Promise((r) => setTimeout(r, 1000 * attempt));
    }
  }
  core.log.info({ id, layer: m.layer, store: store.url }, 'bake: layer put into the object store');
  try {
    await core.locked(id, async (pod) => {
      pod.baked = m.layer;
      await core.save(pod);
    });
  } catch (err: unknown) {
    if (!(err instanceof FeosError && err.code === 'NOT_FOUND')) core.log.warn({ id, layer: m.layer, err: errorMessage(err) }, 'bake: the record does not name the layer');
  }
}

/**
 * At feosd's start: the layers this node sealed whose push a restart cut off (their pod's record may
 * bake, names no baked layer, and its disk is on the blank data volume) are pushed again, in the
 * background, as after a seal. A layer whose manifest cannot be read is left alone. Never throws.
 */
export async function resumeLayerPushes(core: PodCore): Promise<void> {
  if (!core.o.objectStore) return;
  const dir = join(core.o.records.dir, '..', 'layers');
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return;
  }
  for (const layer of names.filter((n) => LAYER_ID.test(n)).sort()) {
    let m: LayerManifest;
    try {
      m = parseLayerManifest(await readFile(join(dir, layer, 'manifest.json')), layer);
    } catch {
      continue;
    }
    const pod = core.o.records.get(m.bakedBy);
    if (!pod?.imageLayers?.bake || pod.baked || pod.disk?.layer || !existsSync(join(dir, layer, 'layer.qcow2'))) continue;
    core.log.info({ id: pod.id, layer }, 'bake: the layer is put again (a restart cut its push)');
    void pushLayer(core, pod.id, m);
  }
}
