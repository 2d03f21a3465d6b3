/**
 * Dialing the control plane (seed 000, "The control plane"): every connection is TLS 1.3 only, without
 * session resumption (no session is ever offered; tickets the server sends are not kept), ALPN `h2`
 * (the uplink, the join) or `feos-node/1` (a node connection), and the server is checked for
 * `--control-plane-name` and exactly the URI `spiffe://<trust domain>/ferun`: before the join against
 * the root the token pins, after it against the trust bundle.
 *
 * TCP_USER_TIMEOUT: Node.js cannot set it (no setsockopt). What stands in for it (docs/feos/fleet.md,
 * "Sockets"): TCP keepalive after 10 s idle, and on every connection HTTP/2 pings every 10 s with 10 s
 * for their answer (feosd's own on the uplink, grpc-js's server keepalive on node connections), so that
 * a connection whose peer stops answering is dropped within 20 s, as the user timeout would.
 */
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import tls from 'node:tls';
import { parsePemCertificates, spkiPin } from './token.ts';

/** The ALPN of a node connection. */
export const NODE_ALPN = 'feos-node/1';
/** TCP keepalive's idle time before the first probe (ms). */
export const KEEPALIVE_MS = 10_000;

/** How a dialed server is trusted: by the root a join token pins, or by the node's trust bundle. */
export type ServerTrust = { pin: string } | { bundlePem: string };

/** What a dial needs. */
export interface DialOptions {
  /** `host:port` or `[v6]:port`. */
  address: string;
  /** The DNS name (or address) the server's certificate must name: `--control-plane-name`. */
  name: string;
  trustDomain: string;
  alpn: 'h2' | typeof NODE_ALPN;
  trust: ServerTrust;
  /** The node's key (PKCS#8 PEM) and chain (PEM), for mutual TLS; none for the join. */
  client?: { keyPem: string; chainPem: string };
  /** The handshake's deadline (ms). @default 10000 */
  timeoutMs?: number;
}

/** Splits `host:port` / `[v6]:port`. @throws Error naming the address */
export function splitAddress(address: string): { host: string; port: number } {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]\s]+)):(\d{1,5})$/.exec(address);
  const port = m ? Number(m[3]) : 0;
  if (!m || port < 1 || port > 65535) throw new Error(`${JSON.stringify(address)}: want HOST:PORT (such as cp.example.com:7443, [fd00::1]:7443)`);
  return { host: m[1] ?? m[2]!, port };
}

/** The URIs of a certificate's subjectAltName. */
function sanUris(cert: X509Certificate): string[] {
  return (cert.subjectAltName ?? '')
    .split(/,\s*/)
    .filter((s) => s.startsWith('URI:'))
    .map((s) => s.slice(4).replace(/^"|"$/g, ''));
}

/**
 * Checks a control plane's leaf certificate: it names `name` (a DNS SAN, or an IP SAN for an address)
 * and carries exactly one URI, `spiffe://<trustDomain>/ferun`.
 * @returns what is wrong, for the log; undefined when it is right
 */
export function checkServerCertificate(cert: X509Certificate, name: string, trustDomain: string): string | undefined {
  const named = isIP(name) ? cert.checkIP(name) !== undefined : cert.checkHost(name, { subject: 'never' }) !== undefined;
  if (!named) return `the control plane's certificate does not name ${name} (it names ${cert.subjectAltName ?? 'nothing'}): give --control-plane-name the name it carries`;
  const want = `spiffe://${trustDomain}/ferun`;
  const uris = sanUris(cert);
  if (uris.length !== 1 || uris[0] !== want) {
    return `the control plane's certificate carries ${uris.length === 0 ? 'no URI' : `the URIs ${uris.join(', ')}`}, not exactly ${want}: check --trust-domain, or this is not the control plane`;
  }
  return undefined;
}

/**
 * Checks the chain a server presented against a pin: some certificate of it has the pinned key, and
 * the leaf chains up to it, each one issued and signed by the next.
 * @returns what is wrong; undefined when it holds
 */
export function checkPinnedChain(chain: X509Certificate[], pin: string): string | undefined {
  const at = chain.findIndex((c) => spkiPin(c) === pin);
  if (at < 0) return "the server's chain does not hold the root the join token pins: the token is for another cluster, or this is not its control plane";
  for (let i = 0; i < at; i++) {
    if (!chain[i]!.checkIssued(chain[i + 1]!) || !chain[i]!.verify(chain[i + 1]!.publicKey)) {
      return `the server's chain is broken: ${chain[i]!.subject} is not signed by ${chain[i + 1]!.subject}`;
    }
  }
  return undefined;
}

/** The chain a TLS socket's peer presented, leaf first. */
function peerChain(socket: tls.TLSSocket): X509Certificate[] {
  const out: X509Certificate[] = [];
  const seen = new Set<string>();
  for (let c: tls.DetailedPeerCertificate | undefined = socket.getPeerCertificate(true); c?.raw; c = c.issuerCertificate) {
    const fp = c.fingerprint256;
    if (seen.has(fp)) break;
    seen.add(fp);
    out.push(new X509Certificate(c.raw));
  }
  return out;
}

/** Whether `bundlePem` holds a certificate with the pinned key. */
export function bundleHoldsPin(bundlePem: string, pin: string): boolean {
  return parsePemCertificates(bundlePem).some((c) => spkiPin(c) === pin);
}

/**
 * Dials the control plane and checks it (the name, the URI, the pin or the bundle, the ALPN).
 * @throws Error saying what failed (connect, handshake, check), for the log; the socket is destroyed
 */
export function dialControlPlane(o: DialOptions): Promise<tls.TLSSocket> {
  const { host, port } = splitAddress(o.address);
  const bundle = 'bundlePem' in o.trust ? o.trust.bundlePem : undefined;
  return new Promise((resolve, reject) => {
    let settled = false;
    const socket = tls.connect({
      host,
      port,
      servername: isIP(o.name) ? undefined : o.name,
      ALPNProtocols: [o.alpn],
      minVersion: 'TLSv1.3',
      maxVersion: 'TLSv1.3',
      key: o.client?.keyPem,
      cert: o.client?.chainPem,
      ca: bundle,
      rejectUnauthorized: bundle !== undefined,
      checkServerIdentity: (_host, peer) => {
        const why = checkServerCertificate(new X509Certificate(peer.raw), o.name, o.trustDomain);
        return why ? new Error(why) : undefined;
      },
    });
    const fail = (err: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      reject(err);
    };
    const timer = setTimeout(() => fail(new Error(`${o.address}: no TLS handshake within ${(o.timeoutMs ?? 10_000) / 1000} s`)), o.timeoutMs ?? 10_000);
    socket.once('error', (err) => fail(new Error(`${o.address}: ${err.message}`, { cause: err })));
    socket.once('secureConnect', () => {
      if ('pin' in o.trust) {
        const chain = peerChain(socket);
        const why = (chain[0] && checkServerCertificate(chain[0], o.name, o.trustDomain)) ?? checkPinnedChain(chain, o.trust.pin);
        if (!chain[0]) return fail(new Error(`${o.address}: the server presented no certificate`));
        if (why) return fail(new Error(`${o.address}: ${why}`));
      }
      if (socket.alpnProtocol !== o.alpn) return fail(new Error(`${o.address}: the server did not take ALPN ${o.alpn} (it answered ${socket.alpnProtocol || 'none'}): is this the control plane's port for nodes?`));
      settled = true;
      clearTimeout(timer);
      socket.setKeepAlive(true, KEEPALIVE_MS);
      socket.setNoDelay(true);
      resolve(socket);
    });
  });
}
