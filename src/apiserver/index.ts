/**
 * The API server of Kube32: a Kubernetes-compatible REST API (discovery, OpenAPI, CRUD, watch,
 * Tables, subresources, the node proxy), with `kube32.io/v1` Checkpoints and Modules. Other
 * components use only what this file exports.
 */
export { createApiServer, type ApiServer, type ApiServerOptions, SYSTEM_NAMESPACES } from './server.ts';
export { type NodeTunnel, NODE_TUNNEL_PROTOCOL } from './handlers/node-tunnel.ts';
export type { FeosPodStreams } from './handlers/feos-pods.ts';
export { issueNodeKubeconfig, issueClientCertificate, userKubeconfig, adminKubeconfigPath, mintToken, kubeconfigYaml, ADMIN_USER, APISERVER_USER } from './pki.ts';
export { ApiError, type Status, type StatusReason } from './errors.ts';
export { evictionCheckpointName, evictionMoves, MIGRATION_ANNOTATION, TRIGGER_LABEL } from './registry/pods/eviction.ts';
export { IMAGE_SHA_ANNOTATION } from './registry/modules/images.ts';
export { DEFAULT_CHECKPOINT_DATA_BYTES } from './registry/checkpoints/data-store.ts';
export { MemoryStorage, SqliteStorage, type Storage, type KubeObject } from './storage/index.ts';
