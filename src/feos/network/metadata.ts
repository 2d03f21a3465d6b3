/**
 * The pods' metadata service at 169.254.169.254 (the seed's "Metadata"), version 2 as
 * Firecracker's MMDS: a PUT /latest/api/token with X-metadata-token-ttl-seconds (1 to 21600)
 * hands out a session token, a GET needs it in X-metadata-token (else 401). AWS IMDSv2's names
 * (X-aws-ec2-metadata-token-ttl-seconds, X-aws-ec2-metadata-token), which its SDKs and cloud-init
 * send, are taken as well. An answer is JSON
 * with `Accept: application/json`, else a string's value or an object's keys one per line.
 *
 * Firecracker is not there, so feosd serves it: the table redirects 169.254.169.254:80 from
 * every TAP to this per-node responder, which knows the pod by the source address (the pod's
 * IPv4 address, which the TAP pins).
 */
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import type { Logger } from '../../lib/index.ts';

/** The largest metadata, as JSON, bytes. */
export const METADATA_MAX_BYTES = 32 * 1024;
/** A token's longest life, seconds. */
export const TOKEN_MAX_TTL_SECONDS = 21_600;

const KEY = /^[A-Za-z0-9._-]{1,128}$/;

/** The token request's TTL header: the seed's (MMDS's) name, then AWS IMDSv2's, which its SDKs and cloud-init send. */
export const TTL_HEADERS = ['x-metadata-token-ttl-seconds', 'x-aws-ec2-metadata-token-ttl-seconds'] as const;
/** The session token's header: MMDS's name, then AWS IMDSv2's. */
export const TOKEN_HEADERS = ['x-metadata-token', 'x-aws-ec2-metadata-token'] as const;

/** The first of `names` the request carries (a header given twice: its first value), or undefined. */
function header(req: http.IncomingMessage, names: readonly string[]): string | undefined {
  for (const n of names) {
    const v = req.headers[n];
    if (typeof v === 'string') return v;
    if (Array.isArray(v) && v.length > 0) return v[0];
  }
  return undefined;
}

/**
 * The 401's text: no token header at all (and, when the request carries a header that looks like a
 * token's under another name, that name and the ones expected), or a token that is not valid.
 */
function unauthorized(req: http.IncomingMessage, token: string | undefined): string {
  const expected = '`X-metadata-token` (or `X-aws-ec2-metadata-token`)';
  if (token !== undefined) return `The MMDS token is not valid (expired, or not this pod's): ask for a new one with PUT /latest/api/token and send it in ${expected}.`;
  const other = Object.keys(req.headers).find((h) => /token/i.test(h));
  if (other !== undefined) return `No MMDS token provided: the request has a \`${other}\` header, but the session token is expected in ${expected}.`;
  return `No MMDS token provided. Use ${expected} header to specify the session token.`;
}

/**
 * Checks a spec's metadata: keys of 1 to 128 letters, digits, '-', '_' and '.', at most 32 KiB as JSON.
 * @throws RangeError naming the key, or the size
 */
export function checkMetadata(metadata: Record<string, string>): void {
  for (const k of Object.keys(metadata)) {
    if (!KEY.test(k)) throw new RangeError(`metadata key "${k.slice(0, 140)}": must be 1 to 128 letters, digits, '-', '_' and '.'`);
  }
  const size = Buffer.byteLength(JSON.stringify(metadata));
  if (size > METADATA_MAX_BYTES) throw new RangeError(`metadata is ${size} bytes as JSON, more than ${METADATA_MAX_BYTES}`);
}

/** What the service holds for one pod: `{ feos: { pod-id, ipv6, ipv4 }, metadata }`. */
export interface PodMetadata {
  podId: string;
  ipv6?: string;
  ipv4: string;
  metadata: Record<string, string>;
}

/** The JSON object a pod's service holds. */
export function metadataDocument(p: PodMetadata): Record<string, unknown> {
  return { feos: { 'pod-id': p.podId, ...(p.ipv6 ? { ipv6: p.ipv6 } : {}), ipv4: p.ipv4 }, metadata: p.metadata };
}

/** The responder: a per-node HTTP server answering each pod from its own document. */
export class MetadataService {
  readonly #server: http.Server;
  readonly #podBySource: (address: string) => PodMetadata | undefined;
  readonly #tokens = new Map<string, { podId: string; expiresAt: number }>();
  readonly #log: Logger;

  constructor(opts: { podBySource: (address: string) => PodMetadata | undefined; log: Logger }) {
    this.#podBySource = opts.podBySource;
    this.#log = opts.log;
    this.#server = http.createServer((req, res) => this.#handle(req, res));
    this.#server.keepAliveTimeout = 5_000;
  }

  /**
   * Listens on `address:port` (port 0: the OS picks).
   * @returns the port
   */
  async listen(address: string, port = 0): Promise<number> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen({ host: address, port }, () => {
        this.#server.off('error', reject);
        resolve();
      });
    });
    return (this.#server.address() as { port: number }).port;
  }

  /** Forgets a pod's tokens (when it leaves the node). */
  forgetPod(podId: string): void {
    for (const [t, v] of this.#tokens) if (v.podId === podId) this.#tokens.delete(t);
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((r) => this.#server.close(() => r()));
  }

  #handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    req.resume();
    const r = this.#answer(req);
    res.writeHead(r.status, { 'content-type': r.type ?? 'text/plain', 'content-length': Buffer.byteLength(r.body) });
    res.end(r.body);
  }

  /** The answer to one request: its status, body and content type. */
  #answer(req: http.IncomingMessage): { status: number; body: string; type?: string } {
    const send = (status: number, body: string, type?: string) => ({ status, body, type });
    const source = (req.socket.remoteAddress ?? '').replace(/^::ffff:/, '');
    const pod = this.#podBySource(source);
    if (!pod) return send(403, 'Forbidden: not a pod of this node.');
    const url = new URL(req.url ?? '/', 'http://169.254.169.254');
    const path = decodeURIComponent(url.pathname);
    if (path === '/latest/api/token') {
      if (req.method !== 'PUT') return send(405, 'Method not allowed: a token is asked for with PUT.');
      // As MMDS: a request relayed through a proxy gets no token.
      if (req.headers['x-forwarded-for'] !== undefined) return send(400, 'Invalid header: a token request may not carry X-Forwarded-For.');
      const ttlText = header(req, TTL_HEADERS);
      const ttl = typeof ttlText === 'string' && /^\d+$/.test(ttlText) ? Number(ttlText) : Number.NaN;
      if (ttlText === undefined) {
        return send(400, `No time to live provided for the token: send it in \`X-metadata-token-ttl-seconds\` (or \`X-aws-ec2-metadata-token-ttl-seconds\`), a value between 1 and ${TOKEN_MAX_TTL_SECONDS}.`);
      }
      if (!(ttl >= 1 && ttl <= TOKEN_MAX_TTL_SECONDS)) {
        return send(400, `Invalid time to live value provided for token: ${ttlText}. Please provide a value between 1 and ${TOKEN_MAX_TTL_SECONDS}.`);
      }
      const token = randomBytes(32).toString('base64url');
      this.#sweep();
      this.#tokens.set(token, { podId: pod.podId, expiresAt: Date.now() + ttl * 1000 });
      return send(200, token);
    }
    if (req.method !== 'GET') return send(405, 'Method not allowed: the metadata is read with GET.');
    const token = header(req, TOKEN_HEADERS);
    const t = token !== undefined ? this.#tokens.get(token) : undefined;
    if (!t || t.podId !== pod.podId || t.expiresAt <= Date.now()) return send(401, unauthorized(req, token));
    let node: unknown = metadataDocument(pod);
    for (const part of path.split('/').filter((p) => p !== '')) {
      if (node === null || typeof node !== 'object' || !Object.hasOwn(node, part)) return send(404, `Resource not found: ${path}.`);
      node = (node as Record<string, unknown>)[part];
    }
    const json = (req.headers.accept ?? '').includes('application/json');
    if (json) return send(200, JSON.stringify(node), 'application/json');
    if (typeof node === 'string') return send(200, node);
    const obj = node as Record<string, unknown>;
    return send(200, Object.keys(obj).map((k) => (typeof obj[k] === 'object' ? `${k}/` : k)).join('\n'));
  }

  #sweep(): void {
    const now = Date.now();
    for (const [t, v] of this.#tokens) if (v.expiresAt <= now) this.#tokens.delete(t);
    this.#log.trace({ tokens: this.#tokens.size }, 'metadata tokens');
  }
}
