/**
 * The microVM layer: microVMs, their records and states (./service.ts) on a VMM (./vmm.ts; QEMU over
 * QMP, ./qemu.ts), the layer's errors (./errors.ts, mapped to gRPC statuses by the API), the accelerator
 * probe.
 */
export { MicroVmService, type MicroVmServiceOptions, type MicroVmSpec, type MicroVmExit, MICROVM_RECORD_VERSION } from './service.ts';
export type { Vmm, VmmSession, VmmSessionEvents, VmmState, VmConfig } from './vmm.ts';
export { QemuVmm, blockIoError } from './qemu.ts';
export { MicroVmError, MicroVmNotFoundError, MicroVmStateError, MicroVmBusyError, MicroVmInvalidError, VmmError, type MicroVmErrorKind } from './errors.ts';
export { chooseAccelerator, probeKvm } from './accel.ts';
export { hostTscKhz, qemuArgs, registryEndpoints, vmPaths, type QemuConfig, REGISTRY_LINK_HOST, REGISTRY_LINK_PORT, REGISTRY_LINK_MAC } from './qemu-args.ts';
export { QmpClient, QmpError, type QmpEvent } from './qmp.ts';
export { pidStartTicks } from './proc.ts';
export { cgroup2Mount, cgroupOf, enterLeaf, givenCgroup, handOverVms, isCgroup2 } from './cgroup.ts';
