/** The microVM layer: QEMU microVMs, their records, QMP, the accelerator probe. */
export { MicroVmService, type MicroVmServiceOptions, type MicroVmSpec, type MicroVmExit, MICROVM_RECORD_VERSION } from './service.ts';
export { chooseAccelerator, probeKvm } from './accel.ts';
export { qemuArgs, vmPaths, type QemuConfig } from './qemu-args.ts';
export { QmpClient, QmpError } from './qmp.ts';
