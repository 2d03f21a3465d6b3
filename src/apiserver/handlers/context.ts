/**
 * What every handler receives: the registry, the authenticated user, and the server's options.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../../lib/index.ts';
import type { Registry } from '../registry/store.ts';
import type { CheckpointDataStore } from '../registry/checkpoints/data-store.ts';
import type { FeosPodStreams } from './feos-pods.ts';
import type { ResourceRequest } from './router.ts';
import type { Authorizer } from '../auth/authorizer.ts';
import type { TokenClaims } from '../pki.ts';
import type { Cacher } from '../storage/cacher.ts';

/** An authenticated user (`user.Info`). */
export interface UserInfo {
  name: string;
  uid?: string;
  groups: string[];
  /** `user.Info`'s extra (impersonated `Impersonate-Extra-*`, a bound token's pod). */
  extra?: Record<string, string[]>;
}

/** Server-wide state and settings the handlers share. */
export interface ServerContext {
  registry: Registry;
  log: Logger;
  maxBodyBytes: number;
  /** Interval of watch bookmarks and keep-alive newlines, in ms. */
  watchHeartbeatMs: number;
  checkpointData: CheckpointDataStore;
  /** The bearer token the server presents to kubelets (user system:kube-apiserver). */
  kubeletToken: string;
  /** Answers a TokenReview: the user of a bearer token, or undefined. */
  authenticateToken(token: string): Promise<UserInfo | undefined>;
  /** Mints a bound token (TokenRequest) with the server's signing key. */
  mintToken(user: UserInfo, claims: TokenClaims): string;
  /** The authorizer chain (system:masters, Node, RBAC). */
  authorizer: Authorizer;
  /** Limit of a module upload in bytes. */
  maxModuleBytes: number;
  /** The watch cache that serves GETs, LISTs and watches (storage/cacher.ts); without it they read the store. */
  cacher?: Cacher;
  /** Bytes a watcher may have unsent before it is ended as too slow (its client watches again). */
  watchBufferBytes?: number;
  /** Open streaming responses (watch, proxy), ended on close. */
  streams: Set<ServerResponse>;
  /**
   * How each open watch ends cleanly (its terminating chunk, then its client watches again), by response:
   * the server's close() ends these first and cuts the other streams.
   */
  streamEnders: Map<ServerResponse, () => void>;
  /** The streams of FeOS pods, once the control plane's port for nodes registered them (./feos-pods.ts). */
  feosPodStreams?: () => FeosPodStreams | undefined;
}

/** One request as the handlers see it. */
export interface RequestScope {
  req: IncomingMessage;
  res: ServerResponse;
  url: URL;
  user: UserInfo;
  info: ResourceRequest;
  ctx: ServerContext;
}
