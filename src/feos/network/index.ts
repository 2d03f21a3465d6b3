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
export { createNetwork, PodNetwork, RULES_INTERVAL_MS } from './network.ts';
export type { NetworkOptions, PodNetworkSpec, KeptPod, GuestNetwork, AttachedPod, PodRecordView } from './network.ts';
export { parseNetworkFlags, checkPodUpstreams, DEFAULT_DNS_UPSTREAMS, IPV4_GATEWAY, IPV6_GATEWAY, METADATA_ADDRESS } from './options.ts';
export type { NetworkFlags, NetworkSettings } from './options.ts';
export { AddressAllocator } from './addresses.ts';
export type { PodAddresses, AddressAllocatorOptions } from './addresses.ts';
export { NetworkError, networkErrorToGrpc, type NetworkErrorCode } from './errors.ts';
export { tapName, podMac, checkPodId, TAP_PREFIX } from './pod-link.ts';
export { checkMetadata, metadataDocument, MetadataService, METADATA_MAX_BYTES } from './metadata.ts';
export { Resolver, lookupName, stripEch, bindResolverSockets, NAME_TTL_SECONDS, type DnsQueryRecord, type ResolverPod } from './dns.ts';
export { compileTable, tableUpdate, defaultGroup, DEFAULT_GROUP, TABLE, NFLOG_DROPS, NFLOG_COPIES } from './table.ts';
export type { CompiledTable, TableInput, TablePod } from './table.ts';
export { SecurityGroupStore, NameTableStore, checkSecurityGroup, checkNameTable } from './stores.ts';
export { grpcServiceDefinition, securityGroupService, nameService, type GrpcService } from './grpc.ts';
export { takeListenFds, type ListenFds } from './listen-fds.ts';
export { trafficService, WATCH_BUFFER_RECORDS, LEFT_POD_MEMORY_MS, TrafficChannel, TrafficCollector, RecentPods, flowEntries, nflogEntries, dnsQueryEntry } from './traffic.ts';
export type { TrafficEntry, TrafficPods, TrafficCollectorOptions, TrafficServiceOptions } from './traffic.ts';
export { scanServerName, scanTlsClientHello, scanHttpRequest, ServerNameAssembler, MAX_SCAN_BYTES, type NameScan, type TcpSegment } from './server-names.ts';
export { PcapNflogReader, parseNflog, parseIpPacket, protocolName, LINKTYPE_NFLOG, type NflogPacket, type IpPacket } from './nflog.ts';
export { parseConntrackLine, parseCtimeUtc, type ConntrackEvent, type ConntrackTuple } from './conntrack-events.ts';
export { parsePrefix, parseAddress, formatPrefix, formatAddress, canonicalAddress, subtractPrefixes, normalizePrefixes, type Prefix, type Family } from './ip.ts';
export { hasIpv4DefaultRoute, hasIpv6DefaultRoute, missingPreconditions, nodeNetworkReason, readNodeNetwork, type NodeNetworkState, type ProcPaths } from './preflight.ts';
export { NodeMesh, MESH_PORT, checkPeers, parseEndpoint, formatEndpoint, type MeshOptions, type JoinMeshAsk, type JoinMeshAnswer } from './mesh.ts';
export { WireGuardDevice, ensureDevice, generatePrivateKey, publicKeyOf, checkKey, MESH_DEVICE, MESH_MTU, UAPI_DIR, type WireGuardImplementation, type DeviceState, type DevicePeer } from './wireguard.ts';
