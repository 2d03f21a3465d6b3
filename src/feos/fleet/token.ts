/**
 * The join token (seed 000, "The control plane"; docs/feos/fleet.md "The join token"):
 * `feos-join-<token-id>-<token-secret>.<pin>`, the pin the lowercase hex SHA-256 of the DER
 * SubjectPublicKeyInfo of the cluster CA's root.
 */
import { createHash, X509Certificate } from 'node:crypto';

/** A parsed join token. */
export interface JoinToken {
  /** `<token-id>-<token-secret>`: what the join sends (the seed's "secret"). */
  secret: string;
  /** 64 lowercase hex digits: the SHA-256 of the pinned root's SubjectPublicKeyInfo (DER). */
  pin: string;
}

/**
 * Parses a token file's text (surrounding white space is ignored).
 * @throws Error saying what the text lacks (empty, no prefix, wrong secret or pin form)
 */
export function parseJoinToken(text: string): JoinToken {
  const t = text.trim();
  if (!t) throw new Error('the join token file is empty: put the token `kube32-cli feos token create` printed into it (feos-join-<token-id>-<token-secret>.<pin>)');
  const m = /^feos-join-([a-z0-9]{6}-[a-z0-9]{16})\.([0-9a-f]{64})$/.exec(t);
  if (!m) {
    throw new Error(
      'the join token file does not hold a join token: want feos-join-<6 of [a-z0-9]>-<16 of [a-z0-9]>.<64 lowercase hex digits> (as `kube32-cli feos token create` prints it)',
    );
  }
  return { secret: m[1]!, pin: m[2]! };
}

/** The pin of a certificate: the lowercase hex SHA-256 of its DER SubjectPublicKeyInfo. */
export function spkiPin(cert: X509Certificate): string {
  return createHash('sha256')
    .update(cert.publicKey.export({ type: 'spki', format: 'der' }))
    .digest('hex');
}

/** The certificates of a PEM text, in order (none when it holds none). */
export function parsePemCertificates(pem: string): X509Certificate[] {
  const out: X509Certificate[] = [];
  for (const m of pem.matchAll(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g)) out.push(new X509Certificate(m[0]));
  return out;
}
