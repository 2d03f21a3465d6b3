/**
 * feosd's side of the control plane (seed 000, "The control plane", "Stopping"; docs/feos/fleet.md):
 * `startFleet` runs the join, the node connections and the uplink; `recordServices` lets the node
 * connections serve the same API as feosd's socket.
 */
export { startFleet, REPORT_INTERVAL_MS, MAX_EVENTS, type Fleet, type FleetDeps, type FleetFlags } from './fleet.ts';
export { recordServices, type ServedService } from './node-conn.ts';
export { parseJoinToken, spkiPin, parsePemCertificates, type JoinToken } from './token.ts';
export { checkServerCertificate, splitAddress, NODE_ALPN } from './tls.ts';
export { moveIdentityAside, nodePaths, type NodeRecord } from './identity.ts';
export { unaryCall, GrpcCallError } from './h2.ts';
