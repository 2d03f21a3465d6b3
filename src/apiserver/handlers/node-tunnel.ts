/**
 * The node proxy of a FeOS node as a byte tunnel (docs/feos/fleet.md, "Through the cluster"):
 * `POST /api/v1/nodes/<node>/proxy/[...]` with `Connection: Upgrade` and `Upgrade: feos-tunnel/1`,
 * authenticated and authorized as any node proxy request (verb `create` on `nodes/proxy`: cluster
 * admins), answers `101 Switching Protocols` and hands the socket to the tunnel the process registered
 * (the control plane's port for nodes, src/fleet), which carries the HTTP/2 inside to the node's
 * connection. Any other upgrade, and one for a node that is not a FeOS node, is refused with a Status.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import { ApiError, errorToStatus } from '../errors.ts';
import { ADMIN_USER, userOfCertificate } from '../pki.ts';
import { nodes } from '../registry/nodes/index.ts';
import type { Registry } from '../registry/store.ts';
import { authorize, bearerToken } from './auth.ts';
import type { UserInfo } from './context.ts';
import { parseResourcePath } from './router.ts';

/** The protocol named in `Upgrade`. */
export const NODE_TUNNEL_PROTOCOL = 'feos-tunnel/1';

/**
 * Whether a request is a FeOS node tunnel's upgrade (`Upgrade: feos-tunnel/1`): the server's
 * `shouldUpgradeCallback`, so that every other upgrade (kubectl exec's SPDY or WebSocket) is served
 * as a request, as before, by the handlers that refuse it with their own Status.
 */
export function isNodeTunnelUpgrade(req: IncomingMessage): boolean {
  return String(req.headers.upgrade ?? '').toLowerCase() === NODE_TUNNEL_PROTOCOL;
}

/** Takes over an upgraded socket for `node` (the 101 is written); `head` is what came after the request. */
export type NodeTunnel = (node: string, socket: Duplex, head: Buffer) => void;

/** What {@link serveNodeTunnel} needs of the server. */
export interface NodeTunnelContext {
  registry: Registry;
  authenticateToken(token: string): Promise<UserInfo | undefined>;
  /** Plain HTTP on loopback: no token is the admin. */
  insecure: boolean;
  /** The registered tunnel, if any (the control plane with `--feos-listen`). */
  tunnel(): NodeTunnel | undefined;
}

function refuse(socket: Duplex, err: unknown): void {
  const { status } = errorToStatus(err);
  const body = JSON.stringify(status);
  const text = `HTTP/1.1 ${status.code} ${status.reason ?? ''}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
  socket.end(text);
}

/** Serves an HTTP/1.1 upgrade request (the server's 'upgrade' event). */
export async function serveNodeTunnel(req: IncomingMessage, socket: Duplex, head: Buffer, ctx: NodeTunnelContext): Promise<void> {
  socket.on('error', () => {});
  try {
    const url = new URL(req.url ?? '/', 'http://apiserver');
    const info = parseResourcePath(url.pathname);
    if (info?.plural !== 'nodes' || info.subresource !== 'proxy' || !info.name || info.group !== '') {
      throw new ApiError('NotFound', `the server serves upgrades only on /api/v1/nodes/<node>/proxy/ (Upgrade: ${NODE_TUNNEL_PROTOCOL})`);
    }
    if (String(req.headers.upgrade ?? '').toLowerCase() !== NODE_TUNNEL_PROTOCOL) throw new ApiError('BadRequest', `unsupported upgrade ${JSON.stringify(req.headers.upgrade ?? '')}: want ${NODE_TUNNEL_PROTOCOL}`);
    if (req.method !== 'POST') throw new ApiError('MethodNotAllowed', `the tunnel to a node is a POST, not ${req.method}`);
    const token = bearerToken(req);
    let user: UserInfo | undefined;
    if (token) user = await ctx.authenticateToken(token);
    else if (ctx.insecure) user = ADMIN_USER;
    else {
      const sock = req.socket as TLSSocket;
      if (sock.authorized) user = userOfCertificate(sock.getPeerCertificate().subject as unknown as Record<string, string | string[] | undefined>);
    }
    if (!user) throw new ApiError('Unauthorized', 'Unauthorized');
    await authorize(ctx.registry, user, 'create', info);
    const node = await ctx.registry.get(nodes, '', info.name);
    if (node.metadata.labels?.['kube32.io/runtime'] !== 'feos') throw new ApiError('BadRequest', `node "${info.name}" is not a FeOS node (label kube32.io/runtime=feos): its node proxy is plain HTTP, without ${NODE_TUNNEL_PROTOCOL}`);
    const tunnel = ctx.tunnel();
    if (!tunnel) throw new ApiError('ServiceUnavailable', 'this API server has no port for FeOS nodes (kube32-cli control-plane --feos-listen): it holds no node connection');
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${NODE_TUNNEL_PROTOCOL}\r\nConnection: Upgrade\r\n\r\n`);
    tunnel(info.name, socket, head);
  } catch (err: unknown) {
    refuse(socket, err);
  }
}
