/**
 * The control plane's side of FeOS nodes (docs/feos/fleet.md; seed 000, "The control plane"): the port
 * for nodes, join tokens, node certificates, the pool of node connections, reports -> Node and Lease,
 * node events -> Events. A bridge between FeOS's public contract (proto/feos) and the Kubernetes API
 * (as a client); other components import only this file.
 */
export { startFleetServer, type FleetServer, type FleetServerOptions, DEFAULT_NODE_CERT_TTL_MS, DEFAULT_REPORT_INTERVAL_MS, ALPN_NODE, ALPN_UPLINK } from './server.ts';
export { createJoinToken, listJoinTokens, deleteJoinToken, type JoinToken, TOKEN_NAMESPACE, TOKEN_SECRET_TYPE } from './tokens.ts';
export { caPin } from './pki.ts';
export { listFleetInstances, type InstanceRecord } from './instances.ts';
export { unary, serverStream, GrpcCallError, type CallOptions } from './node-client.ts';
export { RUNTIME_LABEL, RUNTIME_FEOS, SERIALS_ANNOTATION } from './nodes.ts';
export { fleetPodStreams, type FleetPodStreams, type FeosExec, type FeosExecRequest, type FeosForward, type FeosLogRequest } from './pod-streams.ts';
export { startFeosKubelet, type FeosKubelet, type FeosKubeletOptions } from './kubelet/kubelet.ts';
