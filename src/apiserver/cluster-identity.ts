/**
 * One cluster identity for every API server on one etcd (issue 11, "Several API servers"): the CA
 * (certificate and private key) and the token signing key live in etcd under
 * {@link CLUSTER_IDENTITY_KEY}, outside `/registry/`, so no API resource maps to them and the storage's
 * watch never carries them. The first API server creates the record with a create-if-absent
 * transaction (exactly one of several started at once wins); every API server then keeps a copy in its
 * `<data-dir>/pki/` (`ca.crt`, `ca.key`, `token.key`), where `ensureServingPki`, the token
 * authenticator and the offline minting of node kubeconfigs read it as with SQLite. Each API server
 * still issues its own serving certificate, signed by the shared CA. Tokens are HMACs under the shared
 * key, so the admin token, node tokens and `system:kube-apiserver`'s are the same on every server.
 * See docs/etcd.md, "One cluster identity".
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { Etcd3 } from 'etcd3';
import { type Logger, writeFileAtomicSync } from '../lib/index.ts';
import { checkCertificateAuthority, createCertificateAuthority, pkiPaths } from './pki.ts';

/**
 * The etcd key of the cluster identity. Under `/kube32/` (beside the compaction key), not
 * `/registry/`: the API serves only `/registry/<resource>/...`, so no client reaches it through any
 * API server, whatever its rights; only who can read etcd itself can.
 */
export const CLUSTER_IDENTITY_KEY = '/kube32/cluster-identity';

/** The record at {@link CLUSTER_IDENTITY_KEY}: JSON. */
export interface ClusterIdentity {
  /** Format of the record. */
  version: 1;
  /** PEM of the CA certificate (ECDSA P-256, `CN=kube32-ca`). */
  caCertPem: string;
  /** PEM (PKCS#8) of the CA's private key. */
  caKeyPem: string;
  /** The token signing key (HMAC-SHA256): 32 bytes as 64 lowercase hex digits. */
  tokenKey: string;
  /** When it was made or first put in etcd (RFC 3339). */
  createdAt: string;
}

/** Options of {@link joinClusterIdentity}. */
export interface JoinClusterIdentityOptions {
  /** The API server's data dir; its `pki/` gets the copy. */
  dataDir: string;
  /** etcd client URLs (`http://127.0.0.1:2379`). */
  endpoints: string[];
  /** Deadline of each etcd call, ms. @default 10000 */
  timeoutMs?: number;
  log?: Logger;
}

/** What {@link joinClusterIdentity} did: `created` the record (this server was first) or `joined` an existing one. */
export interface JoinedClusterIdentity {
  identity: ClusterIdentity;
  origin: 'created' | 'joined';
}

/** A cluster identity that cannot be used: a bad record in etcd, or a data dir of another cluster. */
export class ClusterIdentityError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ClusterIdentityError';
  }
}

const TOKEN_KEY = /^[0-9a-f]{64}$/;

/** What a data dir already holds (any part may be missing). */
interface LocalPki {
  caCertPem?: string;
  caKeyPem?: string;
  tokenKey?: string;
}

function readLocal(dataDir: string): LocalPki {
  const p = pkiPaths(dataDir);
  const read = (f: string) => (existsSync(f) ? readFileSync(f, 'utf8') : undefined);
  const local: LocalPki = { caCertPem: read(p.caCert), caKeyPem: read(p.caKey), tokenKey: read(p.tokenKey)?.trim() };
  if ((local.caCertPem === undefined) !== (local.caKeyPem === undefined)) {
    throw new ClusterIdentityError(`${p.dir}: holds ${local.caCertPem ? 'ca.crt without ca.key' : 'ca.key without ca.crt'}: restore the missing file, or move ${p.dir} away to take the cluster's identity from etcd`);
  }
  if (local.tokenKey !== undefined && !TOKEN_KEY.test(local.tokenKey)) throw new ClusterIdentityError(`${p.tokenKey}: not a token key (64 hex digits)`);
  return local;
}

/**
 * Parses and checks a record read from etcd.
 * @throws ClusterIdentityError naming the key and what is wrong
 */
export async function parseClusterIdentity(text: string): Promise<ClusterIdentity> {
  const bad = (why: string, cause?: unknown) => new ClusterIdentityError(`etcd key ${CLUSTER_IDENTITY_KEY}: not a Kube32 cluster identity: ${why}`, { cause });
  let v: Partial<ClusterIdentity>;
  try {
    v = JSON.parse(text) as Partial<ClusterIdentity>;
  } catch (err: unknown) {
    throw bad('not JSON', err);
  }
  if (v === null || typeof v !== 'object') throw bad('not a JSON object');
  if (v.version !== 1) throw bad(`version ${JSON.stringify(v.version)} (this API server reads version 1)`);
  if (typeof v.caCertPem !== 'string' || typeof v.caKeyPem !== 'string') throw bad('caCertPem and caKeyPem must be PEM strings');
  if (typeof v.tokenKey !== 'string' || !TOKEN_KEY.test(v.tokenKey)) throw bad('tokenKey must be 64 hex digits');
  try {
    await checkCertificateAuthority(v.caCertPem, v.caKeyPem);
  } catch (err: unknown) {
    throw bad(err instanceof Error ? err.message : String(err), err);
  }
  return { version: 1, caCertPem: v.caCertPem, caKeyPem: v.caKeyPem, tokenKey: v.tokenKey, createdAt: String(v.createdAt ?? '') };
}

/** The same certificate, whatever the line endings and surrounding blanks. */
const samePem = (a: string, b: string) => a.replace(/\s+/g, '') === b.replace(/\s+/g, '');

/**
 * Checks that what a data dir holds is the cluster's, then writes what it lacks.
 * @throws ClusterIdentityError when a file differs from the cluster's (another cluster's data dir)
 */
function adopt(dataDir: string, local: LocalPki, identity: ClusterIdentity, where: string): void {
  const p = pkiPaths(dataDir);
  const advice = `this data dir belongs to another cluster: use another --data-dir, or move ${p.dir} away to take the identity of the cluster in etcd (${where}, made ${identity.createdAt || 'at an unknown time'})`;
  if (local.caCertPem !== undefined && !samePem(local.caCertPem, identity.caCertPem)) throw new ClusterIdentityError(`${p.caCert} is not the CA of the cluster in etcd: ${advice}`);
  if (local.caKeyPem !== undefined && !samePem(local.caKeyPem, identity.caKeyPem)) throw new ClusterIdentityError(`${p.caKey} is not the CA key of the cluster in etcd: ${advice}`);
  if (local.tokenKey !== undefined && local.tokenKey !== identity.tokenKey) throw new ClusterIdentityError(`${p.tokenKey} is not the token key of the cluster in etcd: ${advice}`);
  mkdirSync(p.dir, { recursive: true, mode: 0o700 });
  if (local.caKeyPem === undefined) writeFileAtomicSync(p.caKey, identity.caKeyPem, 0o600);
  if (local.caCertPem === undefined) writeFileAtomicSync(p.caCert, identity.caCertPem);
  if (local.tokenKey === undefined) writeFileAtomicSync(p.tokenKey, identity.tokenKey, 0o600);
}

/**
 * Takes the cluster identity from etcd, or creates it there: reads {@link CLUSTER_IDENTITY_KEY}; when
 * absent, proposes the data dir's own CA and token key (an API server moving from SQLite to etcd keeps
 * its kubeconfigs valid) or new ones, in one etcd transaction `if create_revision(key) == 0 then put
 * else get`, so that of several API servers starting at once exactly one creates it and the others
 * read the winner's. Then the data dir's `pki/` holds the cluster's CA and token key (missing files
 * written, 0600 for keys).
 * @returns the identity and whether this call created it
 * @throws RangeError when `endpoints` is empty or not http(s) URLs
 * @throws ClusterIdentityError when the data dir holds another cluster's CA or token key, a partial
 *   CA, or etcd holds a record that is not an identity; nothing is written then
 * @throws Error when etcd does not answer within `timeoutMs` (naming the endpoints)
 */
export async function joinClusterIdentity(opts: JoinClusterIdentityOptions): Promise<JoinedClusterIdentity> {
  if (!Array.isArray(opts.endpoints) || opts.endpoints.length === 0) throw new RangeError('cluster identity: endpoints must list at least one etcd URL (--etcd-endpoints http://HOST:2379,...)');
  for (const e of opts.endpoints) {
    if (!URL.canParse(e) || !/^https?:$/.test(new URL(e).protocol)) throw new RangeError(`cluster identity: etcd endpoint ${JSON.stringify(e)} is not an http(s) URL`);
  }
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const where = `${opts.endpoints.join(',')} ${CLUSTER_IDENTITY_KEY}`;
  const local = readLocal(opts.dataDir);
  const client = new Etcd3({ hosts: opts.endpoints.map((e) => e.replace(/\/$/, '')), defaultCallOptions: () => ({ deadline: Date.now() + timeoutMs }) });
  const etcdCall = async <T>(step: string, call: () => Promise<T>): Promise<T> => {
    try {
      return await call();
    } catch (err: unknown) {
      throw new Error(`cluster identity: ${step} at etcd ${opts.endpoints.join(',')}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  };
  try {
    const stored = await etcdCall('reading', () => client.get(CLUSTER_IDENTITY_KEY).string());
    if (stored !== null) {
      const identity = await parseClusterIdentity(stored);
      adopt(opts.dataDir, local, identity, where);
      opts.log?.info({ key: CLUSTER_IDENTITY_KEY }, 'joined the cluster identity kept in etcd');
      return { identity, origin: 'joined' };
    }
    const ca = local.caCertPem !== undefined && local.caKeyPem !== undefined ? { certPem: local.caCertPem, keyPem: local.caKeyPem } : await createCertificateAuthority();
    if (local.caCertPem !== undefined) {
      try {
        await checkCertificateAuthority(ca.certPem, ca.keyPem);
      } catch (err: unknown) {
        throw new ClusterIdentityError(`${pkiPaths(opts.dataDir).dir}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
    }
    const proposal: ClusterIdentity = { version: 1, caCertPem: ca.certPem, caKeyPem: ca.keyPem, tokenKey: local.tokenKey ?? randomBytes(32).toString('hex'), createdAt: new Date().toISOString() };
    const txn = await etcdCall('creating', () =>
      client.if(CLUSTER_IDENTITY_KEY, 'Create', '==', 0).then(client.put(CLUSTER_IDENTITY_KEY).value(JSON.stringify(proposal))).else(client.get(CLUSTER_IDENTITY_KEY)).commit(),
    );
    if (txn.succeeded) {
      adopt(opts.dataDir, local, proposal, where);
      opts.log?.info({ key: CLUSTER_IDENTITY_KEY, fromDataDir: local.caCertPem !== undefined }, 'created the cluster identity in etcd');
      return { identity: proposal, origin: 'created' };
    }
    // Another API server created it between the read and the transaction: take its.
    const kv = txn.responses[0]?.response_range?.kvs[0];
    if (!kv) throw new Error(`cluster identity: etcd ${opts.endpoints.join(',')} answered the transaction on ${CLUSTER_IDENTITY_KEY} with neither a write nor the key`);
    const identity = await parseClusterIdentity(kv.value.toString());
    adopt(opts.dataDir, local, identity, where);
    opts.log?.info({ key: CLUSTER_IDENTITY_KEY }, 'joined the cluster identity another API server created at the same time');
    return { identity, origin: 'joined' };
  } finally {
    client.close();
  }
}
