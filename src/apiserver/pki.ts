/**
 * The server's certificate authority, serving certificate, bearer tokens and kubeconfigs, all
 * under `<data-dir>/pki/`. The CA (ECDSA P-256, 10 years) is made on first start and kept; the
 * serving certificate is issued afresh at each start for the addresses the server listens on.
 * Tokens are `k32.<payload>.<HMAC-SHA256>` over `{u: user, g: groups}` with a key kept in
 * `pki/token.key`, so a token minted by `issueNodeKubeconfig` in another process is valid at once.
 * With etcd storage the CA and token key are the cluster's, kept in etcd and copied here at start by
 * `joinClusterIdentity` (cluster-identity.ts), so every API server of the cluster reads the same ones.
 */
// @peculiar/x509 (through tsyringe) needs the Reflect metadata polyfill loaded first.
import 'reflect-metadata';
import { createHmac, randomBytes, timingSafeEqual, webcrypto } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import * as x509 from '@peculiar/x509';
import { stringify as toYaml, parse as parseYaml } from 'yaml';
import { writeFileAtomicSync } from '../lib/index.ts';
import type { UserInfo } from './handlers/context.ts';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);
const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

/** The admin user's name and groups. */
export const ADMIN_USER: UserInfo = { name: 'kube32-admin', groups: ['system:masters', 'system:authenticated'] };
/** The user the API server is to kubelets. */
export const APISERVER_USER: UserInfo = { name: 'system:kube-apiserver', groups: ['system:masters', 'system:authenticated'] };

/** PEM files of the CA and the serving certificate. */
export interface ServingPki {
  caCertPem: string;
  certPem: string;
  keyPem: string;
}

function pkiDir(dataDir: string): string {
  const d = join(dataDir, 'pki');
  mkdirSync(d, { recursive: true, mode: 0o700 });
  return d;
}

async function keyPem(key: CryptoKey): Promise<string> {
  const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', key as webcrypto.CryptoKey);
  return x509.PemConverter.encode(pkcs8, 'PRIVATE KEY');
}

async function importKey(pem: string): Promise<CryptoKey> {
  const der = x509.PemConverter.decodeFirst(pem);
  return (await webcrypto.subtle.importKey('pkcs8', der, ALG, true, ['sign'])) as unknown as CryptoKey;
}

/** The files of a data dir's cluster identity: `pki/ca.crt`, `pki/ca.key` (0600), `pki/token.key` (0600, 64 hex digits). */
export function pkiPaths(dataDir: string): { dir: string; caCert: string; caKey: string; tokenKey: string } {
  const dir = join(dataDir, 'pki');
  return { dir, caCert: join(dir, 'ca.crt'), caKey: join(dir, 'ca.key'), tokenKey: join(dir, 'token.key') };
}

/**
 * Makes a certificate authority: ECDSA P-256, self-signed `CN=kube32-ca`, valid 10 years (from an hour
 * ago, for clock skew).
 * @returns PEM of the certificate and of its PKCS#8 private key
 */
export async function createCertificateAuthority(): Promise<{ certPem: string; keyPem: string }> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as unknown as { publicKey: CryptoKey; privateKey: CryptoKey };
  const now = new Date();
  const caCert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomBytes(8).toString('hex'),
    name: 'CN=kube32-ca',
    notBefore: new Date(now.getTime() - 3600_000),
    notAfter: new Date(now.getTime() + 10 * 365 * 86400_000),
    keys,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign | x509.KeyUsageFlags.digitalSignature, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { certPem: caCert.toString('pem'), keyPem: await keyPem(keys.privateKey) };
}

/**
 * Checks that PEM texts are a CA certificate and the private key of its public key (ECDSA P-256).
 * @throws Error saying which part is wrong
 */
export async function checkCertificateAuthority(certPem: string, keyPemText: string): Promise<void> {
  let cert: x509.X509Certificate;
  try {
    cert = new x509.X509Certificate(certPem);
  } catch (err: unknown) {
    throw new Error(`the CA certificate is not a PEM X.509 certificate: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  let key: CryptoKey;
  try {
    key = await importKey(keyPemText);
  } catch (err: unknown) {
    throw new Error(`the CA key is not a PEM PKCS#8 ECDSA P-256 private key: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  const pub = (await webcrypto.subtle.exportKey('jwk', (await cert.publicKey.export(ALG, ['verify'])) as webcrypto.CryptoKey)) as { x?: string; y?: string };
  const priv = (await webcrypto.subtle.exportKey('jwk', key as webcrypto.CryptoKey)) as { x?: string; y?: string };
  if (pub.x !== priv.x || pub.y !== priv.y) throw new Error(`the CA key is not the key of the CA certificate (${cert.subject})`);
}

/**
 * Loads the CA from `<data-dir>/pki` or makes it, then issues a serving certificate for `hosts`
 * (IP addresses or DNS names; 127.0.0.1, ::1, localhost and this host's name are always included).
 * With etcd storage the CA was put there from etcd first (cluster-identity.ts), so every API server
 * of a cluster signs its own serving certificate with the one CA.
 * @throws Error naming the file when the stored CA cannot be read
 */
export async function ensureServingPki(dataDir: string, hosts: string[]): Promise<ServingPki> {
  const dir = pkiDir(dataDir);
  const caCertPath = join(dir, 'ca.crt');
  const caKeyPath = join(dir, 'ca.key');
  let caCert: x509.X509Certificate;
  let caKey: CryptoKey;
  if (existsSync(caCertPath) && existsSync(caKeyPath)) {
    try {
      caCert = new x509.X509Certificate(readFileSync(caCertPath, 'utf8'));
      caKey = await importKey(readFileSync(caKeyPath, 'utf8'));
    } catch (err: unknown) {
      throw new Error(`${caCertPath}: cannot read the certificate authority: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  } else {
    const ca = await createCertificateAuthority();
    caCert = new x509.X509Certificate(ca.certPem);
    caKey = await importKey(ca.keyPem);
    writeFileAtomicSync(caKeyPath, ca.keyPem, 0o600);
    writeFileAtomicSync(caCertPath, ca.certPem);
  }
  const serverKeys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as unknown as { publicKey: CryptoKey; privateKey: CryptoKey };
  const names = new Set(['127.0.0.1', '::1', 'localhost', hostname(), 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc', ...hosts]);
  const isIp = (h: string) => /^\d+\.\d+\.\d+\.\d+$/.test(h) || h.includes(':');
  const now = new Date();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: randomBytes(8).toString('hex'),
    subject: 'CN=kube-apiserver',
    issuer: caCert.subject,
    notBefore: new Date(now.getTime() - 3600_000),
    notAfter: new Date(now.getTime() + 365 * 86400_000),
    publicKey: serverKeys.publicKey,
    signingKey: caKey,
    signingAlgorithm: ALG,
    extensions: [
      new x509.SubjectAlternativeNameExtension([...names].filter((n) => n && n !== '0.0.0.0' && n !== '::').map((n) => ({ type: isIp(n) ? 'ip' : 'dns', value: n }))),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.BasicConstraintsExtension(false, undefined, true),
    ],
  });
  return { caCertPem: caCert.toString('pem'), certPem: cert.toString('pem'), keyPem: await keyPem(serverKeys.privateKey) };
}

/**
 * Issues a client certificate signed by the cluster CA (ECDSA P-256, 1 year): CN is the user's
 * name, O its groups, as Kubernetes reads them. The API server accepts it in place of a token.
 * @returns PEM of the certificate and of its private key
 * @throws Error when the data dir has no CA yet (start the API server once)
 */
export async function issueClientCertificate(dataDir: string, user: { name: string; groups: string[] }): Promise<{ certPem: string; keyPem: string }> {
  const dir = pkiDir(dataDir);
  const caCertPath = join(dir, 'ca.crt');
  if (!existsSync(caCertPath)) throw new Error(`${caCertPath}: no certificate authority: start the API server with --data-dir ${dataDir} first`);
  const caCert = new x509.X509Certificate(readFileSync(caCertPath, 'utf8'));
  const caKey = await importKey(readFileSync(join(dir, 'ca.key'), 'utf8'));
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as unknown as { publicKey: CryptoKey; privateKey: CryptoKey };
  const esc = (v: string) => v.replace(/([,+="<>#;\\])/g, '\\$1');
  const subject = [`CN=${esc(user.name)}`, ...user.groups.map((g) => `O=${esc(g)}`)].join(', ');
  const now = new Date();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: randomBytes(8).toString('hex'),
    subject,
    issuer: caCert.subject,
    notBefore: new Date(now.getTime() - 3600_000),
    notAfter: new Date(now.getTime() + 365 * 86400_000),
    publicKey: keys.publicKey,
    signingKey: caKey,
    signingAlgorithm: ALG,
    extensions: [
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.clientAuth]),
      new x509.BasicConstraintsExtension(false, undefined, true),
    ],
  });
  return { certPem: cert.toString('pem'), keyPem: await keyPem(keys.privateKey) };
}

/** The user of a verified client certificate's subject: CN is the name, each O a group. */
export function userOfCertificate(subject: Record<string, string | string[] | undefined>): UserInfo | undefined {
  const cn = subject.CN;
  const name = Array.isArray(cn) ? cn[0] : cn;
  if (!name) return undefined;
  const o = subject.O;
  const groups = o === undefined ? [] : Array.isArray(o) ? o : [o];
  return { name, groups: [...new Set([...groups, 'system:authenticated'])] };
}

/** The token signing key of a data dir (made on first use: 32 random bytes, kept as 64 hex digits). */
function tokenKey(dataDir: string): Buffer {
  const p = join(pkiDir(dataDir), 'token.key');
  if (!existsSync(p)) writeFileAtomicSync(p, randomBytes(32).toString('hex'), 0o600);
  return Buffer.from(readFileSync(p, 'utf8').trim(), 'hex');
}

/**
 * What a bound token carries beyond its user (a ServiceAccount's TokenRequest): the account it was issued
 * to (refused once that account, by uid, is gone), the pod it is bound to, its audiences and expiry.
 */
export interface TokenClaims {
  /** The ServiceAccount: namespace, name, uid. */
  serviceAccount?: { namespace: string; name: string; uid: string };
  /** The object the token is bound to (a Pod or Secret by name and uid): the token dies with it. */
  boundObject?: { kind: string; name: string; uid: string };
  /** Audiences; a token for others than the API server's is refused by it. */
  audiences?: string[];
  /** Expiry, seconds since the epoch. */
  expiresAt?: number;
}

/** The user of a token and what it is bound to. */
export type TokenUser = UserInfo & TokenClaims;

/** Mints a bearer token for `user` with `key` (`k32.<payload>.<HMAC-SHA256>`). */
export function mintTokenWithKey(key: Buffer, user: UserInfo, claims: TokenClaims = {}): string {
  const body: Record<string, unknown> = { u: user.name, g: user.groups };
  if (user.uid) body.uid = user.uid;
  if (claims.serviceAccount) body.sa = claims.serviceAccount;
  if (claims.boundObject) body.obj = claims.boundObject;
  if (claims.audiences) body.aud = claims.audiences;
  if (claims.expiresAt !== undefined) body.exp = claims.expiresAt;
  const payload = Buffer.from(JSON.stringify(body)).toString('base64url');
  const sig = createHmac('sha256', key).update(payload).digest('base64url');
  return `k32.${payload}.${sig}`;
}

/** Mints a bearer token for `user` with the key of a data dir. */
export function mintToken(dataDir: string, user: UserInfo, claims: TokenClaims = {}): string {
  return mintTokenWithKey(tokenKey(dataDir), user, claims);
}

/** The token signing key of a data dir (made on first use). */
export function tokenKeyOf(dataDir: string): Buffer {
  return tokenKey(dataDir);
}

/** Checks bearer tokens against a signing key (a data dir's, or one given). */
export class TokenAuthenticator {
  private readonly key: Buffer;
  /** Tokens already checked (a token's user never changes: it is signed into it; expiry is checked by the caller). */
  private readonly cache = new Map<string, TokenUser>();
  constructor(dataDirOrKey: string | Buffer) {
    this.key = typeof dataDirOrKey === 'string' ? tokenKey(dataDirOrKey) : dataDirOrKey;
  }
  /** The user of `token` and its claims, or undefined when it is not one of this server's. */
  authenticate(token: string): TokenUser | undefined {
    const hit = this.cache.get(token);
    if (hit) return hit;
    const user = this.verify(token);
    if (user) {
      if (this.cache.size >= 4096) this.cache.clear();
      this.cache.set(token, user);
    }
    return user;
  }

  private verify(token: string): TokenUser | undefined {
    const m = /^k32\.([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$/.exec(token);
    if (!m) return undefined;
    const want = createHmac('sha256', this.key).update(m[1]!).digest();
    const got = Buffer.from(m[2]!, 'base64url');
    if (got.length !== want.length || !timingSafeEqual(got, want)) return undefined;
    try {
      const p = JSON.parse(Buffer.from(m[1]!, 'base64url').toString()) as { u: string; g: string[]; uid?: string; sa?: TokenClaims['serviceAccount']; obj?: TokenClaims['boundObject']; aud?: string[]; exp?: number };
      const user: TokenUser = { name: p.u, groups: [...new Set([...(p.g ?? []), 'system:authenticated'])] };
      if (p.uid) user.uid = p.uid;
      if (p.sa) user.serviceAccount = p.sa;
      if (p.obj) user.boundObject = p.obj;
      if (p.aud) user.audiences = p.aud;
      if (p.exp !== undefined) user.expiresAt = p.exp;
      return user;
    } catch {
      return undefined;
    }
  }
}

/** Options of a kubeconfig. */
export interface KubeconfigOptions {
  server: string;
  token: string;
  user: string;
  /** PEM of the CA; none for plain HTTP. */
  caCertPem?: string;
  namespace?: string;
}

/** A kubeconfig's YAML text for one cluster, user and context named `kube32`. */
export function kubeconfigYaml(o: KubeconfigOptions): string {
  const cluster: Record<string, unknown> = { server: o.server };
  if (o.caCertPem) cluster['certificate-authority-data'] = Buffer.from(o.caCertPem).toString('base64');
  return toYaml({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'kube32', cluster }],
    users: [{ name: o.user, user: { token: o.token } }],
    contexts: [{ name: 'kube32', context: { cluster: 'kube32', user: o.user, namespace: o.namespace ?? 'default' } }],
    'current-context': 'kube32',
    preferences: {},
  });
}

/** Path of the admin kubeconfig of a data dir. */
export function adminKubeconfigPath(dataDir: string): string {
  return join(dataDir, 'kubeconfig');
}

/**
 * Writes a kubeconfig for the kubelet of `nodeName` (user `system:node:<name>`, group
 * `system:nodes`) beside the admin one: `<data-dir>/nodes/<name>.kubeconfig`. The server address
 * and CA come from the admin kubeconfig, so the API server must have started once.
 * @returns the path written
 * @throws Error when the data dir has no admin kubeconfig yet, or the node name is not a DNS subdomain
 */
export function issueNodeKubeconfig(dataDir: string, nodeName: string, opts: { path?: string } = {}): string {
  if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(nodeName) || nodeName.length > 253) throw new RangeError(`node name "${nodeName}" is not a lowercase RFC 1123 subdomain`);
  const admin = adminKubeconfigPath(dataDir);
  if (!existsSync(admin)) throw new Error(`${admin}: no admin kubeconfig: start the API server with --data-dir ${dataDir} first`);
  const cfg = parseYaml(readFileSync(admin, 'utf8')) as { clusters: { cluster: { server: string; 'certificate-authority-data'?: string } }[] };
  const c = cfg.clusters[0]!.cluster;
  const user = `system:node:${nodeName}`;
  const token = mintToken(dataDir, { name: user, groups: ['system:nodes'] });
  const caPem = c['certificate-authority-data'] ? Buffer.from(c['certificate-authority-data'], 'base64').toString() : undefined;
  const dir = join(dataDir, 'nodes');
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const path = opts.path ?? join(dir, `${nodeName}.kubeconfig`);
  writeFileAtomicSync(path, kubeconfigYaml({ server: c.server, token, user, caCertPem: caPem }), 0o600);
  return path;
}

/**
 * A kubeconfig for a user with a client certificate the cluster CA signs (CN `name`, O each group; 1 year),
 * the server address and CA taken from the data dir's admin kubeconfig (`kube32-cli kubeconfig user`).
 * The user has no rights until RBAC grants them (`kubectl create rolebinding ... --user NAME`).
 * @returns the kubeconfig's YAML text (it holds the private key: write it 0600)
 * @throws Error when the data dir has no CA or admin kubeconfig yet (start the API server once)
 */
export async function userKubeconfig(dataDir: string, user: { name: string; groups: string[]; namespace?: string }): Promise<string> {
  const admin = adminKubeconfigPath(dataDir);
  if (!existsSync(admin)) throw new Error(`${admin}: no admin kubeconfig: start the API server with --data-dir ${dataDir} first`);
  const cfg = parseYaml(readFileSync(admin, 'utf8')) as { clusters: { cluster: Record<string, unknown> }[] };
  const cluster = cfg.clusters[0]!.cluster;
  const { certPem, keyPem: key } = await issueClientCertificate(dataDir, user);
  return toYaml({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'kube32', cluster }],
    users: [{ name: user.name, user: { 'client-certificate-data': Buffer.from(certPem).toString('base64'), 'client-key-data': Buffer.from(key).toString('base64') } }],
    contexts: [{ name: `${user.name}@kube32`, context: { cluster: 'kube32', user: user.name, namespace: user.namespace ?? 'default' } }],
    'current-context': `${user.name}@kube32`,
    preferences: {},
  });
}
