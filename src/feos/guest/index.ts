/** The guest side of FeOS as feosd sees it: the guest client, the channel's wire pieces, image references and pulls, the volumes' mke2fs. */
export { GuestClient, attachGuest, type GuestConnection } from './client.ts';
export { GrpcError, GrpcCode } from './grpc-wire.ts';
export { GuestHandshake, HostHandshake, H2_PREFACE } from './channel.ts';
export { AsyncQueue, FrameReader, frameMessage, serveStreams, streamCall } from './grpc-wire.ts';
export { ImageStore, parseImageRef, PullError, type ImageRef } from './images.ts';
export { commandFailure, MAX_VOLUME_BLOCKS, mke2fsArgs, mke2fsTimeoutMs } from './volume-format.ts';
