/**
 * The node's identity in `--node-dir` (seed 000, "The control plane"): the directory mode 0700 with
 * `key.pem` (ECDSA P-256, PKCS#8, 0600, made once and kept across renewals), `chain.pem` (the node's
 * certificate, then its issuer), `bundle.pem` (the roots the control plane is trusted by) and
 * `node.json` (name, SPIFFE ID, the certificate's end and renewal time, the instances listed last),
 * each written whole (writeFileAtomic: temp, fsync, rename).
 */
import 'reflect-metadata';
import { createPrivateKey, createPublicKey, generateKeyPairSync, webcrypto, type X509Certificate } from 'node:crypto';
import { chmod, mkdir, readFile, rename, stat } from 'node:fs/promises';
import { join } from 'node:path';
import * as x509 from '@peculiar/x509';
import { writeFileAtomic } from '../../lib/index.ts';
import { parsePemCertificates } from './token.ts';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);
const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

/** A control-plane instance as node.json keeps it. */
export interface InstanceRef {
  name: string;
  /** host:port of its port for nodes. */
  address: string;
}

/** node.json. */
export interface NodeRecord {
  name: string;
  /** spiffe://<trust domain>/node/<name> */
  spiffeId: string;
  /** The certificate's end (RFC 3339). */
  notAfter: string;
  /** When the node renews (RFC 3339). */
  renewAt: string;
  /** The instances the control plane listed last. */
  instances: InstanceRef[];
}

/** A joined node's identity. */
export interface Identity {
  keyPem: string;
  chainPem: string;
  bundlePem: string;
  record: NodeRecord;
}

/** The files of the node's directory. */
export function nodePaths(dir: string): { key: string; chain: string; bundle: string; record: string } {
  return { key: join(dir, 'key.pem'), chain: join(dir, 'chain.pem'), bundle: join(dir, 'bundle.pem'), record: join(dir, 'node.json') };
}

/** Makes the node's directory (0700) and sets its mode. @throws Error naming the directory */
export async function ensureNodeDir(dir: string): Promise<void> {
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await chmod(dir, 0o700);
  } catch (err: unknown) {
    throw new Error(`--node-dir ${dir}: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * The node's key: key.pem when it is there, else a new ECDSA P-256 key written to it (PKCS#8, 0600).
 * @throws Error naming key.pem when it is there but not a P-256 PKCS#8 key
 */
export async function loadOrMakeKey(dir: string): Promise<string> {
  const path = nodePaths(dir).key;
  let pem: string | undefined;
  try {
    pem = await readFile(path, 'utf8');
  } catch (err: unknown) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  if (pem !== undefined) {
    try {
      const k = createPrivateKey(pem);
      if (k.asymmetricKeyType !== 'ec' || k.asymmetricKeyDetails?.namedCurve !== 'prime256v1') throw new Error('not an ECDSA P-256 key');
    } catch (err: unknown) {
      throw new Error(`${path}: not the node's ECDSA P-256 PKCS#8 key (${(err as Error).message}); move it away to make a new one (the node then joins again)`, { cause: err });
    }
    return pem;
  }
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const out = privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
  await writeFileAtomic(path, out, 0o600);
  return out;
}

/** A PKCS#10 signing request (PEM) for the node's key, subject `CN=system:node:<name>, O=system:nodes`. */
export async function makeCsr(keyPem: string, name: string, trustDomain: string): Promise<string> {
  const priv = createPrivateKey(keyPem);
  const privateKey = await webcrypto.subtle.importKey('pkcs8', priv.export({ type: 'pkcs8', format: 'der' }), ALG, true, ['sign']);
  const publicKey = await webcrypto.subtle.importKey('spki', createPublicKey(priv).export({ type: 'spki', format: 'der' }), ALG, true, ['verify']);
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name: `CN=system:node:${name}, O=system:nodes`,
    keys: { privateKey, publicKey } as never,
    signingAlgorithm: ALG,
    extensions: [new x509.SubjectAlternativeNameExtension([{ type: 'url', value: `spiffe://${trustDomain}/node/${name}` }])],
  });
  return csr.toString('pem');
}

/**
 * Checks an issued chain against the node's key and SPIFFE ID: its leaf is for the node's key and
 * carries exactly that URI.
 * @returns the leaf; @throws Error saying what does not match
 */
export function checkIssuedChain(chainPem: string, keyPem: string, spiffeId: string): X509Certificate {
  const leaf = parsePemCertificates(chainPem)[0];
  if (!leaf) throw new Error('the answer holds no certificate');
  const mine = createPublicKey(createPrivateKey(keyPem)).export({ type: 'spki', format: 'der' });
  if (!leaf.publicKey.export({ type: 'spki', format: 'der' }).equals(mine)) throw new Error("the issued certificate is not for the node's key");
  if (spiffeId && !(leaf.subjectAltName ?? '').split(/,\s*/).includes(`URI:${spiffeId}`)) throw new Error(`the issued certificate does not carry ${spiffeId}`);
  return leaf;
}

/** Writes chain.pem, bundle.pem and node.json, each whole (chain and bundle 0644, node.json 0644). */
export async function writeIdentity(dir: string, id: Omit<Identity, 'keyPem'>): Promise<void> {
  const p = nodePaths(dir);
  await writeFileAtomic(p.chain, id.chainPem, 0o644);
  await writeFileAtomic(p.bundle, id.bundlePem, 0o644);
  await writeRecord(dir, id.record);
}

/** Writes node.json whole. */
export async function writeRecord(dir: string, record: NodeRecord): Promise<void> {
  await writeFileAtomic(nodePaths(dir).record, `${JSON.stringify(record, null, 2)}\n`, 0o644);
}

/**
 * The node's identity from its directory, or undefined while it has not joined (no chain.pem). A
 * node.json that does not parse is rebuilt from chain.pem (name and SPIFFE ID from its URI, its end,
 * the renewal at two thirds of its life, no instances) and `onRepair` says so.
 * @throws Error naming the file when key.pem, chain.pem or bundle.pem cannot be read
 */
export async function loadIdentity(dir: string, onRepair: (why: string) => void): Promise<Identity | undefined> {
  const p = nodePaths(dir);
  let chainPem: string;
  try {
    chainPem = await readFile(p.chain, 'utf8');
  } catch (err: unknown) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  const keyPem = await readFile(p.key, 'utf8');
  const bundlePem = await readFile(p.bundle, 'utf8');
  const leaf = parsePemCertificates(chainPem)[0];
  if (!leaf) throw new Error(`${p.chain}: holds no certificate; move the node's directory away to join again`);
  let record: NodeRecord | undefined;
  try {
    const r = JSON.parse(await readFile(p.record, 'utf8')) as NodeRecord;
    if (typeof r.name !== 'string' || typeof r.spiffeId !== 'string' || Number.isNaN(Date.parse(r.renewAt)) || !Array.isArray(r.instances)) throw new Error('fields missing');
    record = r;
  } catch (err: unknown) {
    const uri = /URI:(spiffe:\/\/[^,]+\/node\/([^,]+))/.exec(leaf.subjectAltName ?? '');
    const from = Date.parse(leaf.validFrom);
    const to = Date.parse(leaf.validTo);
    record = {
      name: uri?.[2] ?? '',
      spiffeId: uri?.[1] ?? '',
      notAfter: new Date(to).toISOString(),
      renewAt: new Date(from + ((to - from) * 2) / 3).toISOString(),
      instances: [],
    };
    onRepair(`${p.record} is not the node's record (${(err as Error).message}): rebuilt from chain.pem`);
    await writeRecord(dir, record);
  }
  return { keyPem, chainPem, bundlePem, record };
}

/**
 * Moves the identity (key.pem, chain.pem, bundle.pem, node.json) into `removed-<time>/` of the node's
 * directory, the time as `2026-12-02T01-02-03.456Z`.
 * @returns the directory it went to
 */
export async function moveIdentityAside(dir: string, now = new Date()): Promise<string> {
  const to = join(dir, `removed-${now.toISOString().replace(/:/g, '-')}`);
  await mkdir(to, { mode: 0o700 });
  const p = nodePaths(dir);
  for (const f of [p.chain, p.bundle, p.record, p.key]) {
    try {
      await stat(f);
      await rename(f, join(to, f.slice(dir.length + 1)));
    } catch (err: unknown) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
  return to;
}
