/**
 * Join tokens (docs/feos/fleet.md, "The join token"): kube-system Secrets `bootstrap-token-<id>` of type
 * `bootstrap.kubernetes.io/token`, as kubeadm keeps its bootstrap tokens, so that several API servers on
 * one etcd see the same ones and `kubectl -n kube-system get secrets` shows them. The whole token a
 * node is given is `feos-join-<id>-<secret>.<pin>`; the node sends `<id>-<secret>`.
 */
import { randomInt, timingSafeEqual } from 'node:crypto';
import type { CoreV1Api, V1Secret } from '@kubernetes/client-node';

/** The namespace of the token Secrets. */
export const TOKEN_NAMESPACE = 'kube-system';
/** The Secret type of bootstrap tokens. */
export const TOKEN_SECRET_TYPE = 'bootstrap.kubernetes.io/token';
/** The group a FeOS join token's `auth-extra-groups` names. */
export const FEOS_BOOTSTRAP_GROUP = 'system:bootstrappers:feos';

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
/** `<id>-<secret>`: 6 and 16 characters of [a-z0-9]. */
export const TOKEN_SECRET_RE = /^([a-z0-9]{6})-([a-z0-9]{16})$/;

/** A join token as `feos token list` shows it. */
export interface JoinToken {
  id: string;
  /** RFC 3339, or '' for a token that does not expire. */
  expiration: string;
  description: string;
  usages: string[];
  groups: string[];
  /** The Secret's creation time (RFC 3339). */
  created: string;
}

/** A token the join refuses: the reason is for the control plane's log, the node hears PERMISSION_DENIED only. */
export class TokenRefused extends Error {}

function random(n: number): string {
  let s = '';
  for (let i = 0; i < n; i++) s += ALPHABET[randomInt(ALPHABET.length)];
  return s;
}

function b64(s: string): string {
  return Buffer.from(s, 'utf8').toString('base64');
}

function field(secret: V1Secret, key: string): string {
  const v = secret.data?.[key];
  if (v !== undefined) return Buffer.from(v, 'base64').toString('utf8');
  return secret.stringData?.[key] ?? '';
}

/** The Secret's token, as listed. */
export function tokenOfSecret(secret: V1Secret): JoinToken {
  const usages = Object.keys(secret.data ?? {})
    .filter((k) => k.startsWith('usage-bootstrap-') && field(secret, k) === 'true')
    .map((k) => k.slice('usage-bootstrap-'.length));
  const created = secret.metadata?.creationTimestamp;
  return {
    id: field(secret, 'token-id'),
    expiration: field(secret, 'expiration'),
    description: field(secret, 'description'),
    usages,
    groups: field(secret, 'auth-extra-groups').split(',').filter(Boolean),
    created: created instanceof Date ? created.toISOString() : String(created ?? ''),
  };
}

/**
 * Creates a join token: a random id and secret, kept as the kube-system Secret `bootstrap-token-<id>`.
 * @param ttlMs how long it is valid, ms; 0 = it never expires
 * @returns the id, `<id>-<secret>` and the expiration (RFC 3339, '' for none)
 * @throws the API's error (client-node ApiException) when the Secret cannot be created
 */
export async function createJoinToken(core: CoreV1Api, ttlMs: number, description: string): Promise<{ id: string; tokenSecret: string; expiration: string }> {
  const id = random(6);
  const secret = random(16);
  const expiration = ttlMs > 0 ? new Date(Date.now() + ttlMs).toISOString().replace(/\.\d{3}Z$/, 'Z') : '';
  const data: Record<string, string> = {
    'token-id': b64(id),
    'token-secret': b64(secret),
    description: b64(description),
    'usage-bootstrap-authentication': b64('true'),
    'auth-extra-groups': b64(FEOS_BOOTSTRAP_GROUP),
  };
  if (expiration) data.expiration = b64(expiration);
  await core.createNamespacedSecret({
    namespace: TOKEN_NAMESPACE,
    body: { apiVersion: 'v1', kind: 'Secret', metadata: { name: `bootstrap-token-${id}`, namespace: TOKEN_NAMESPACE }, type: TOKEN_SECRET_TYPE, data },
  });
  return { id, tokenSecret: `${id}-${secret}`, expiration };
}

/** The bootstrap tokens of the cluster (the kube-system Secrets of their type), oldest first. */
export async function listJoinTokens(core: CoreV1Api): Promise<JoinToken[]> {
  const list = await core.listNamespacedSecret({ namespace: TOKEN_NAMESPACE });
  return list.items
    .filter((s) => s.type === TOKEN_SECRET_TYPE && (s.metadata?.name ?? '').startsWith('bootstrap-token-'))
    .map(tokenOfSecret)
    .sort((a, b) => a.created.localeCompare(b.created) || a.id.localeCompare(b.id));
}

/**
 * Deletes the token `id` (its Secret).
 * @throws the API's error: 404 when there is no such token
 */
export async function deleteJoinToken(core: CoreV1Api, id: string): Promise<void> {
  await core.deleteNamespacedSecret({ name: `bootstrap-token-${id}`, namespace: TOKEN_NAMESPACE });
}

/**
 * Checks `<id>-<secret>` against its Secret: it must exist, be of the bootstrap type, allow
 * authentication, not be expired (by this process's clock), and hold the same secret.
 * @returns the token id
 * @throws TokenRefused saying why (for the log); other errors (the API unreachable) as they come
 */
export async function checkJoinToken(core: CoreV1Api, tokenSecret: string, now = Date.now()): Promise<string> {
  const m = TOKEN_SECRET_RE.exec(tokenSecret);
  if (!m) throw new TokenRefused('the token is not of the form <6 characters>-<16 characters> of [a-z0-9]');
  const [, id, secret] = m as unknown as [string, string, string];
  let s: V1Secret;
  try {
    s = await core.readNamespacedSecret({ name: `bootstrap-token-${id}`, namespace: TOKEN_NAMESPACE });
  } catch (err: unknown) {
    if ((err as { code?: number }).code === 404) throw new TokenRefused(`no token ${id} (deleted, or never made)`);
    throw err;
  }
  if (s.type !== TOKEN_SECRET_TYPE) throw new TokenRefused(`kube-system/bootstrap-token-${id} is not of type ${TOKEN_SECRET_TYPE}`);
  if (field(s, 'token-id') !== id) throw new TokenRefused(`kube-system/bootstrap-token-${id} names another token id`);
  if (field(s, 'usage-bootstrap-authentication') !== 'true') throw new TokenRefused(`token ${id} is not for authentication`);
  const exp = field(s, 'expiration');
  if (exp) {
    const t = Date.parse(exp);
    if (!Number.isFinite(t) || t <= now) throw new TokenRefused(`token ${id} expired at ${exp}`);
  }
  const want = Buffer.from(field(s, 'token-secret'));
  const got = Buffer.from(secret);
  if (want.length !== got.length || !timingSafeEqual(want, got)) throw new TokenRefused(`token ${id}: wrong secret`);
  return id;
}
