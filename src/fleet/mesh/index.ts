/**
 * The mesh's control-plane half (seed 000, "The mesh"; docs/feos/fleet.md, "The mesh"): the cluster's
 * ULA /64 and the nodes' /96s (./allocation.ts), the peers sent over the node connections (./peers.ts),
 * and the whole of it for the port for nodes (./mesh.ts). The rest of src/fleet imports only this file.
 */
export { startMesh, type Mesh, type MeshJoin, type MeshOptions } from './mesh.ts';
export {
  DEFAULT_MESH_NODE_LIMIT,
  MAX_MESH_NODE_LIMIT,
  MESH_CONFIGMAP,
  MESH_NAMESPACE,
  MeshArgumentError,
  MeshExhausted,
  MeshKeyTaken,
  type MeshNode,
  type MeshRecord,
  nodePrefix,
  prefixIndex,
} from './allocation.ts';
export { MESH_RESYNC_MS, peersOf } from './peers.ts';
