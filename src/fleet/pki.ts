/**
 * The certificates of the port for nodes (docs/feos/fleet.md, "Certificates"; seed 000, "The control
 * plane"): the cluster CA is read from `<data-dir>/pki/ca.crt` and `ca.key` as the API server lays them
 * out (src/apiserver/pki.ts; with etcd storage every API server holds the same copy), and it issues the
 * server certificate of the port (SANs: DNS names, addresses, `spiffe://<td>/ferun`) and the node
 * certificates (the node's own ECDSA P-256 key from its CSR, SAN URI `spiffe://<td>/node/<name>`).
 */
// @peculiar/x509 (through tsyringe) needs the Reflect metadata polyfill loaded first.
import 'reflect-metadata';
import { createHash, randomBytes, webcrypto, X509Certificate as NodeX509 } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import * as x509 from '@peculiar/x509';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);
const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

/** A CSR that cannot be taken: not PEM PKCS#10, a bad signature, or not an ECDSA P-256 key. */
export class CsrError extends Error {}

/** The cluster CA, loaded for issuing. */
export interface ClusterCa {
  /** PEM of the CA's certificate: the root the join tokens pin and the trust bundle holds. */
  certPem: string;
  cert: x509.X509Certificate;
  key: CryptoKey;
  /** The pin of join tokens: lowercase hex SHA-256 of the root's DER SubjectPublicKeyInfo. */
  pin: string;
}

/**
 * The pin of a CA certificate as kubeadm's `--discovery-token-ca-cert-hash` takes it: lowercase hex
 * SHA-256 of its DER SubjectPublicKeyInfo.
 * @param certPem a PEM certificate (the first one is used)
 * @throws Error when it does not parse
 */
export function caPin(certPem: string): string {
  const spki = new NodeX509(certPem).publicKey.export({ type: 'spki', format: 'der' });
  return createHash('sha256').update(spki).digest('hex');
}

/**
 * Loads the cluster CA from `<data-dir>/pki/` (`ca.crt`, `ca.key`).
 * @throws Error naming the file when it is missing or does not parse
 */
export async function loadClusterCa(dataDir: string): Promise<ClusterCa> {
  const certPath = join(dataDir, 'pki', 'ca.crt');
  const keyPath = join(dataDir, 'pki', 'ca.key');
  try {
    const certPem = readFileSync(certPath, 'utf8');
    const der = x509.PemConverter.decodeFirst(readFileSync(keyPath, 'utf8'));
    const key = (await webcrypto.subtle.importKey('pkcs8', der, ALG, false, ['sign'])) as unknown as CryptoKey;
    return { certPem, cert: new x509.X509Certificate(certPem), key, pin: caPin(certPem) };
  } catch (err: unknown) {
    throw new Error(`${certPath}: cannot read the cluster CA: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
}

/**
 * Issues the server certificate of the port for nodes: a new ECDSA P-256 key, SANs `names` (DNS names
 * or IP addresses; unspecified addresses are left out) and the URI `spiffe://<trustDomain>/ferun`,
 * serverAuth, one year.
 * @returns PEM of the chain (certificate, then the CA) and of the PKCS#8 key
 */
export async function issueServerCertificate(ca: ClusterCa, names: string[], trustDomain: string): Promise<{ chainPem: string; keyPem: string }> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as unknown as { publicKey: CryptoKey; privateKey: CryptoKey };
  const now = Date.now();
  const sans = [...new Set(names)].filter((n) => n && n !== '0.0.0.0' && n !== '::').map((n) => ({ type: isIP(n) ? ('ip' as const) : ('dns' as const), value: n }));
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: randomBytes(8).toString('hex'),
    subject: 'CN=kube32-feos-control-plane',
    issuer: ca.cert.subject,
    notBefore: new Date(now - 3600_000),
    notAfter: new Date(now + 365 * 86400_000),
    publicKey: keys.publicKey,
    signingKey: ca.key,
    signingAlgorithm: ALG,
    extensions: [
      new x509.SubjectAlternativeNameExtension([...sans, { type: 'url', value: `spiffe://${trustDomain}/ferun` }]),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.BasicConstraintsExtension(false, undefined, true),
    ],
  });
  const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey as webcrypto.CryptoKey);
  return { chainPem: `${cert.toString('pem')}\n${ca.certPem.trim()}\n`, keyPem: x509.PemConverter.encode(pkcs8, 'PRIVATE KEY') };
}

/**
 * Parses and checks a node's CSR: PEM PKCS#10, a valid signature, an ECDSA P-256 key.
 * @returns the request and its key's DER SubjectPublicKeyInfo
 * @throws CsrError saying which part is wrong
 */
export async function parseCsr(csrPem: string): Promise<{ csr: x509.Pkcs10CertificateRequest; spki: Buffer }> {
  let csr: x509.Pkcs10CertificateRequest;
  try {
    csr = new x509.Pkcs10CertificateRequest(csrPem);
  } catch (err: unknown) {
    throw new CsrError(`csr_pem is not a PEM PKCS#10 certificate signing request: ${err instanceof Error ? err.message : String(err)}`);
  }
  const alg = csr.publicKey.algorithm as { name?: string; namedCurve?: string };
  if (alg.name !== 'ECDSA' || alg.namedCurve !== 'P-256') throw new CsrError(`csr_pem: the key is ${alg.name ?? 'unknown'}${alg.namedCurve ? ` ${alg.namedCurve}` : ''}, want ECDSA P-256`);
  let ok = false;
  try {
    ok = await csr.verify();
  } catch {
    ok = false;
  }
  if (!ok) throw new CsrError("csr_pem: the request's signature does not verify with its key");
  return { csr, spki: Buffer.from(csr.publicKey.rawData) };
}

/** An issued node certificate. */
export interface NodeCertificate {
  /** The certificate, then the CA (PEM). */
  chainPem: string;
  /** Lowercase hex serial number: the revocation record names it. */
  serial: string;
  notAfter: Date;
  /** Two thirds of its life. */
  renewAt: Date;
}

/**
 * Issues a node certificate for the CSR's key: SAN URI `spiffe://<trustDomain>/node/<name>`, subject
 * `CN=system:node:<name>, O=system:nodes`, clientAuth, valid `ttlMs` from now (backdated a minute for
 * clock skew), to be renewed at two thirds of `ttlMs`.
 */
export async function issueNodeCertificate(ca: ClusterCa, csr: x509.Pkcs10CertificateRequest, nodeName: string, trustDomain: string, ttlMs: number): Promise<NodeCertificate> {
  const now = Date.now();
  const serial = `01${randomBytes(15).toString('hex')}`;
  const notAfter = new Date(Math.floor((now + ttlMs) / 1000) * 1000);
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial,
    subject: `CN=system:node:${nodeName}, O=system:nodes`,
    issuer: ca.cert.subject,
    notBefore: new Date(now - 60_000),
    notAfter,
    publicKey: csr.publicKey,
    signingKey: ca.key,
    signingAlgorithm: ALG,
    extensions: [
      new x509.SubjectAlternativeNameExtension([{ type: 'url', value: `spiffe://${trustDomain}/node/${nodeName}` }]),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.clientAuth]),
      new x509.BasicConstraintsExtension(false, undefined, true),
    ],
  });
  return {
    chainPem: `${cert.toString('pem')}\n${ca.certPem.trim()}\n`,
    serial,
    notAfter,
    renewAt: new Date(now + Math.floor((ttlMs * 2) / 3)),
  };
}

/** The node a verified peer certificate names, read from its one SPIFFE URI; undefined when it names none. */
export function nodeOfCertificate(uriSans: string | undefined, trustDomain: string): string | undefined {
  // Node.js gives subjectaltname as "URI:spiffe://td/node/name, DNS:..."
  const uris = (uriSans ?? '').split(/,\s*/).filter((s) => s.startsWith('URI:')).map((s) => s.slice(4));
  const prefix = `spiffe://${trustDomain}/node/`;
  const mine = uris.filter((u) => u.startsWith(prefix));
  if (uris.length !== 1 || mine.length !== 1) return undefined;
  const name = mine[0]!.slice(prefix.length);
  return /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(name) ? name : undefined;
}
