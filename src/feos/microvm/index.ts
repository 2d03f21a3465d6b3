/** The microVM layer: QEMU microVMs, their records, QMP, the accelerator probe. */
export { MicroVmService, type MicroVmServiceOptions, type MicroVmSpec, type MicroVmExit, MICROVM_RECORD_VERSION } from './service.ts';
export { chooseAccelerator, probeKvm } from './accel.ts';
export { hostTscKhz, qemuArgs, registryEndpoints, vmPaths, type QemuConfig, REGISTRY_LINK_HOST, REGISTRY_LINK_MAC, REGISTRY_LINK_PORT } from './qemu-args.ts';
export { QmpClient, QmpError } from './qmp.ts';
export { pidStartTicks } from './proc.ts';
