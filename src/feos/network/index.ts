/**
 * FeOS's pods' network, the door of src/feos/network (the seed's "The pods' network", "Devices
 * and routes", "Addresses", "The table", "Security groups", "Name tables", "DNS", "Metadata", "Traffic records").
 *
 * feosd wires it with a few calls:
 * ```ts
 * const network = createNetwork({ stateDir, podPrefix, podIpv4Range, dnsAddress, otlpAddress, dnsUpstreams, denyPrefixes, log });
 * const keptAddresses = await network.start(keptPods);   // never throws for the network; see unavailableReason
 * for (const s of network.grpcServices()) server.addService(s.definition, s.implementation);
 * await network.createPod(id, spec);     // CreatePod: addresses, kept before returned
 * await network.attachPod(id);           // every boot/resume: { tap, mac, guest }
 * await network.detachPod(id);           // stop/suspend
 * await network.removePod(id);           // delete/hibernate
 * await network.stop();
 * ```
 * Or through the pod layer's interface: `new PodService({ network: network.podNetworkProvider(), ... })`.
 */

export type { AddressAllocatorOptions, PodAddresses } from './addresses.ts';
export { AddressAllocator } from './addresses.ts';
export { type ConntrackEvent, type ConntrackTuple, parseConntrackLine, parseCtimeUtc } from './conntrack-events.ts';
export { bindResolverSockets, type DnsQueryRecord, lookupName, NAME_TTL_SECONDS, Resolver, type ResolverPod, stripEch } from './dns.ts';
export { NetworkError, type NetworkErrorCode, networkErrorToGrpc } from './errors.ts';
export { type GrpcService, grpcServiceDefinition, nameService, securityGroupService } from './grpc.ts';
export { canonicalAddress, type Family, formatAddress, formatPrefix, normalizePrefixes, type Prefix, parseAddress, parsePrefix, subtractPrefixes } from './ip.ts';
export { type ListenFds, takeListenFds } from './listen-fds.ts';
export { checkPeers, formatEndpoint, type JoinMeshAnswer, type JoinMeshAsk, MESH_PORT, type MeshOptions, NodeMesh, parseEndpoint } from './mesh.ts';
export { checkMetadata, METADATA_MAX_BYTES, MetadataService, metadataDocument } from './metadata.ts';
export type { AttachedPod, GuestNetwork, KeptPod, NetworkOptions, PodNetworkSpec, PodRecordView } from './network.ts';
export { createNetwork, PodNetwork, RULES_INTERVAL_MS } from './network.ts';
export { type IpPacket, LINKTYPE_NFLOG, type NflogPacket, PcapNflogReader, parseIpPacket, parseNflog, protocolName } from './nflog.ts';
export type { NetworkFlags, NetworkSettings } from './options.ts';
export { checkPodUpstreams, DEFAULT_DNS_UPSTREAMS, IPV4_GATEWAY, IPV6_GATEWAY, METADATA_ADDRESS, parseNetworkFlags } from './options.ts';
export { checkPodId, podMac, TAP_PREFIX, tapName } from './pod-link.ts';
export { hasIpv4DefaultRoute, hasIpv6DefaultRoute, missingPreconditions, type NodeNetworkState, nodeNetworkReason, type ProcPaths, readNodeNetwork } from './preflight.ts';
export { MAX_SCAN_BYTES, type NameScan, ServerNameAssembler, scanHttpRequest, scanServerName, scanTlsClientHello, type TcpSegment } from './server-names.ts';
export { checkNameTable, checkSecurityGroup, NameTableStore, SecurityGroupStore } from './stores.ts';
export type { CompiledTable, TableInput, TablePod } from './table.ts';
export { compileTable, DEFAULT_GROUP, defaultGroup, NFLOG_COPIES, NFLOG_DROPS, TABLE, tableUpdate } from './table.ts';
export type { TrafficCollectorOptions, TrafficEntry, TrafficPods, TrafficServiceOptions } from './traffic.ts';
export { dnsQueryEntry, flowEntries, LEFT_POD_MEMORY_MS, nflogEntries, RecentPods, TrafficChannel, TrafficCollector, trafficService, WATCH_BUFFER_RECORDS } from './traffic.ts';
export { checkKey, type DevicePeer, type DeviceState, ensureDevice, generatePrivateKey, MESH_DEVICE, MESH_MTU, publicKeyOf, UAPI_DIR, WireGuardDevice, type WireGuardImplementation } from './wireguard.ts';
export { checkUapiServer, INSTALL_HINT, lastLines, ownNetns, resolveExecutable, startWireguardGo, type UapiServer, uapiServer } from './wireguard-go.ts';
