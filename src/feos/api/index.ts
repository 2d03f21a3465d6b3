/** feosd's API plumbing: errors and their statuses, the protobuf-es ↔ grpc-js adapter. */
export { Code, type CodeName, FeosError, asFeosError, vmBusy, errorMessage, toGrpcStatus, isVmBusy, codeName, VM_BUSY_TYPE_URL } from './errors.ts';
export { serviceDefinition, addService, makeClient, type Client, type ServiceHandlers } from './grpc.ts';
