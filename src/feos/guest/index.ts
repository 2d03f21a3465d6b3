/** The guest side of FeOS as feosd sees it: the guest client and the channel's wire pieces. */
export { GuestClient, attachGuest, type GuestConnection } from './client.ts';
export { GrpcError, GrpcCode } from './grpc-wire.ts';
