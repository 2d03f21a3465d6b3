/**
 * The kube32-sim worker (the Kube32 kubelet): its public door. Other components import only this
 * file. `main(argv)` in `main.ts` is the executable; `startKubelet` runs a worker in-process.
 * Seed 002: "Kubelet endpoints", "What moves", "What keeps a pod from moving", "Drain and
 * evictions", "Policies".
 */
export {
  podSpecBlockers,
  isHardwareResource,
  HARDWARE_CAPABILITIES,
  ENTRY_POINT_EXPORTS,
  I2C_DEVICE_GRANT,
  SD_VOLUME_DRIVER,
  MIGRATION_ANNOTATION,
  type ModuleFacts,
} from './spec-blockers.ts';
