/** The node itself: HostService. */
export { hostHandlers, inOwnPidNamespace, FEOSD_VERSION, type HostServiceOptions } from './service.ts';
