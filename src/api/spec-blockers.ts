/**
 * The blockers that the pod spec alone reveals: seed 002 "What keeps a pod from moving", the rows
 * "Found by: Control plane". The kubelet checks them too, so that a direct
 * `POST /checkpoint/<ns>/<pod>/<container>` refuses such a pod exactly as the Checkpoint controller
 * and the API server's eviction do: all three import this one function from `src/api/index.ts`.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { ANNOTATIONS, RESOURCE_NAMES } from './names.ts';

/** Capabilities that grant a board's hardware to a pod (seed: `grant capability <NAME>`). */
export const HARDWARE_CAPABILITIES: readonly string[] = ['DISPLAY', 'KEYBOARD', 'SPEAKER', 'SD', 'CHIP_TEMP'];

/** The resource, annotation and volume driver that mark an I2C device grant (`grant kube32.io/i2c-device`). */
export const I2C_DEVICE_GRANT = RESOURCE_NAMES.i2cDevice;

/** The CSI (or flex) volume driver of a board's SD card (`volume claim <claim> on node storage`). */
export const SD_VOLUME_DRIVER = RESOURCE_NAMES.sdVolumeDriver;

/** The pod annotation that sets the migration policy (`OnDrain`, `Never`, `Auto`). */
export const MIGRATION_ANNOTATION = ANNOTATIONS.migration;

/** The module exports that make a module an app pod (seed: "entry point _start runs on its own thread"). */
export const ENTRY_POINT_EXPORTS: readonly string[] = ['_start', 'app_main', 'main'];

/**
 * Whether a resource name is a hardware resource that pins a pod to its node: any
 * `hardware.kube32.io/<x>` except `hardware.kube32.io/ipc`, and any `esp32.io/<x>`.
 */
export function isHardwareResource(name: string): boolean {
  if (name.startsWith(RESOURCE_NAMES.hardwarePrefix)) return name !== RESOURCE_NAMES.hardwareIpc;
  return name.startsWith(RESOURCE_NAMES.esp32Prefix);
}

/** What the node knows of the pod's module, for the entry-point blocker. */
export interface ModuleFacts {
  /** The entry-point export the module has (`_start`, `app_main` or `main`), if any. */
  entryPoint?: string | undefined;
}

/**
 * Lists every reason, found in the pod spec, why a pod cannot be checkpointed or moved, in the
 * order of the seed's table, each exactly as the seed writes it:
 *
 * - `grant <resource>` for each request or limit of a hardware resource (see {@link isHardwareResource}),
 *   once per resource name across all containers;
 * - `grant capability <NAME>` for each of DISPLAY, KEYBOARD, SPEAKER, SD, CHIP_TEMP in a container's
 *   `securityContext.capabilities.add`;
 * - `grant kube32.io/i2c-device` when the pod has an I2C device grant: a request or limit of the
 *   resource `kube32.io/i2c-device`, or the pod annotation `kube32.io/i2c-device`;
 * - `volume claim <claim> on node storage` for each `persistentVolumeClaim` volume (its `claimName`)
 *   and each `kube32.io/sd` volume (a `csi` or `flexVolume` volume with that driver; its volume name);
 * - `annotation kube32.io/migration: Never` when the pod opts out;
 * - `entry point <name> runs on its own thread` when `module` says the module has an entry point
 *   (the node knows it from the module; the control plane passes nothing for WebAssembly images).
 *
 * Pure: it reads the pod and changes nothing. An empty list means the spec allows a move; the node
 * may still find blockers of its own (open files, a call that outlasts the freeze timeout).
 *
 * @param pod the Pod as stored (spec and metadata are read; status is ignored)
 * @param module facts of the loaded module, where the caller has them
 * @returns the blockers, deduplicated, in the seed's order; `[]` when none
 * @example podSpecBlockers({ metadata: { annotations: { 'kube32.io/migration': 'Never' } }, spec: { containers: [] } })
 *   // ['annotation kube32.io/migration: Never']
 */
export function podSpecBlockers(pod: V1Pod, module?: ModuleFacts): string[] {
  const grants: string[] = [];
  const capabilities: string[] = [];
  let i2c = pod.metadata?.annotations?.[I2C_DEVICE_GRANT] !== undefined;
  const containers = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])];
  for (const c of containers) {
    const names = [...Object.keys(c.resources?.requests ?? {}), ...Object.keys(c.resources?.limits ?? {})];
    for (const name of names) {
      if (name === I2C_DEVICE_GRANT) i2c = true;
      else if (isHardwareResource(name) && !grants.includes(name)) grants.push(name);
    }
    for (const cap of c.securityContext?.capabilities?.add ?? []) {
      const plain = cap.startsWith('CAP_') ? cap.slice(4) : cap;
      if (HARDWARE_CAPABILITIES.includes(plain) && !capabilities.includes(plain)) capabilities.push(plain);
    }
  }
  const blockers = [...grants.map((r) => `grant ${r}`), ...capabilities.map((c) => `grant capability ${c}`)];
  if (i2c) blockers.push(`grant ${I2C_DEVICE_GRANT}`);
  for (const v of pod.spec?.volumes ?? []) {
    if (v.persistentVolumeClaim) blockers.push(`volume claim ${v.persistentVolumeClaim.claimName} on node storage`);
    else if (v.csi?.driver === SD_VOLUME_DRIVER || v.flexVolume?.driver === SD_VOLUME_DRIVER) {
      blockers.push(`volume claim ${v.name} on node storage`);
    }
  }
  if (pod.metadata?.annotations?.[MIGRATION_ANNOTATION] === 'Never') blockers.push(`annotation ${MIGRATION_ANNOTATION}: Never`);
  if (module?.entryPoint) blockers.push(`entry point ${module.entryPoint} runs on its own thread`);
  return [...new Set(blockers)];
}
