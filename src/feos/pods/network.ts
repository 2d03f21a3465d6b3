/**
 * What the pod layer asks of the pods' network (seed 000, "The pods' network"), which src/feos/network
 * implements. Without it (no --pod-prefix), `unavailablePodNetwork` refuses pods with a network with
 * FAILED_PRECONDITION and the reason, and every other pod works as before.
 */
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { ConfigureNetworkRequestSchema } from '../gen/feos/guest/v1/guest_pb.js';
import type { PodInfo, PodNetwork } from '../gen/feos/pod/v1/pod_pb.js';

/** A pod's network as a boot or resume needs it. */
export interface PodNetworkAttachment {
  ipv6Address: string;
  ipv4Address: string;
  /** The TAP device, `pod-<id>`, made before the boot. */
  tap: string;
  /** `06:00:` and four bytes of the SHA-256 of the ID. */
  mac: string;
  /** What the guest is pushed (addresses, gateways, resolvers, routes). */
  guest: MessageInitShape<typeof ConfigureNetworkRequestSchema>;
}

/** The pods' network, as the pod layer uses it. Every call is idempotent. */
export interface PodNetworkProvider {
  /** Undefined when a pod with this network can be made; else why not (a FAILED_PRECONDITION). */
  check(network: PodNetwork): string | undefined;
  /** Before every boot and resume: hands out the pod's addresses (once) and makes its TAP device. */
  setUp(pod: PodInfo): Promise<PodNetworkAttachment>;
  /** At delete: the TAP device, the addresses and the rules go. */
  tearDown(pod: PodInfo): Promise<void>;
  /** After a stop, a suspend or a crash: the TAP device goes, the pod keeps its addresses. */
  detach?(pod: PodInfo): Promise<void>;
}

/** The provider of a node whose network is not set up. */
export const unavailablePodNetwork: PodNetworkProvider = {
  check: () => "the pods' network is not set up on this node (feosd has no --pod-prefix)",
  setUp: async () => {
    throw new Error("the pods' network is not set up on this node (feosd has no --pod-prefix)");
  },
  tearDown: async () => {},
};
