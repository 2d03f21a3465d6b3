/**
 * Who may call the kubelet's endpoints: only the control plane (seed "Kubelet endpoints"). A
 * request carries `Authorization: Bearer <token>`; the kubelet asks the API server who that is
 * (`POST /apis/authentication.k8s.io/v1/tokenreviews`) and allows the user `system:kube-apiserver`
 * or a member of `system:masters`. Answers are cached for 10 s (allowed) or 2 s (refused).
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { V1TokenReview } from '@kubernetes/client-node';
import { type ControlPlane, errorMessage } from './client.ts';

/** The user the API server is when it calls kubelets. */
export const CONTROL_PLANE_USER = 'system:kube-apiserver';
/** The group whose members may call the kubelet. */
export const ADMIN_GROUP = 'system:masters';
const ALLOWED_TTL_MS = 10_000;
const REFUSED_TTL_MS = 2_000;

/** The outcome of authenticating one request. */
export type AuthResult = { ok: true; user: string } | { ok: false; status: 401 | 403; message: string };

/** Checks bearer tokens with TokenReview, with a small cache. */
export class KubeletAuthenticator {
  readonly #cp: ControlPlane;
  readonly #cache = new Map<string, { result: AuthResult; until: number }>();

  constructor(cp: ControlPlane) {
    this.#cp = cp;
  }

  /** Authenticates and authorises one request: 401 without a valid token, 403 for another identity. */
  async check(req: IncomingMessage): Promise<AuthResult> {
    const header = req.headers.authorization ?? '';
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!m) return { ok: false, status: 401, message: 'Unauthorized: a bearer token is required' };
    const key = createHash('sha256').update(m[1]!).digest('hex');
    const now = Date.now();
    const hit = this.#cache.get(key);
    if (hit && hit.until > now) return hit.result;
    const result = await this.#review(m[1]!);
    if (this.#cache.size > 1000) this.#cache.clear();
    this.#cache.set(key, { result, until: now + (result.ok ? ALLOWED_TTL_MS : REFUSED_TTL_MS) });
    return result;
  }

  async #review(token: string): Promise<AuthResult> {
    let review: V1TokenReview;
    try {
      review = await this.#cp.json<V1TokenReview>('POST', '/apis/authentication.k8s.io/v1/tokenreviews', {
        body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token } },
      });
    } catch (err: unknown) {
      return { ok: false, status: 401, message: `Unauthorized: the token could not be reviewed: ${errorMessage(err)}` };
    }
    if (!review.status?.authenticated) return { ok: false, status: 401, message: 'Unauthorized' };
    const user = review.status.user?.username ?? '';
    const groups = review.status.user?.groups ?? [];
    if (user === CONTROL_PLANE_USER || groups.includes(ADMIN_GROUP)) return { ok: true, user };
    return { ok: false, status: 403, message: `Forbidden: user "${user}" may not call the kubelet; only the control plane may` };
  }
}
