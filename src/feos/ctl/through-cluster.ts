/**
 * `feosctl --kubeconfig FILE --node NAME <command>` (docs/feos/feosctl.md; docs/feos/fleet.md,
 * "Through the cluster"): a node's API reached through the Kubernetes control plane rather than its
 * socket. feosctl listens on a loopback port of its own that its grpc-js clients dial; each connection
 * they open is tunnelled to the API server as `POST /api/v1/nodes/NAME/proxy/` with `Upgrade:
 * feos-tunnel/1` (the kubeconfig's credentials; authorized as the node proxy: cluster admins), and the
 * HTTP/2 inside reaches the node over its node connection with the control plane.
 */
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';

/** The Upgrade protocol the API server takes for a FeOS node's node proxy. */
const TUNNEL_PROTOCOL = 'feos-tunnel/1';

/** An open loopback end of the tunnel. */
export interface ClusterTunnel {
  /** The grpc-js target to dial: `127.0.0.1:PORT`. */
  target: string;
  /**
   * Why the last tunnel was refused (the API server's Status message, or the connection's error), as a
   * gRPC code's name and a message: NOT_FOUND for a node the cluster does not have, else UNAVAILABLE.
   */
  lastError(): { code: 'NOT_FOUND' | 'UNAVAILABLE'; message: string } | undefined;
  /** Stops listening and ends the tunnels. */
  close(): void;
}

/**
 * Opens the loopback end of the tunnel to `node` through the cluster of `kubeconfigPath`.
 * @throws Error when the kubeconfig cannot be read or names no cluster
 */
export async function openClusterTunnel(kubeconfigPath: string, node: string): Promise<ClusterTunnel> {
  const { KubeConfig } = await import('@kubernetes/client-node');
  const kc = new KubeConfig();
  try {
    kc.loadFromFile(kubeconfigPath);
  } catch (err: unknown) {
    throw new Error(`--kubeconfig ${kubeconfigPath}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error(`--kubeconfig ${kubeconfigPath}: its current context names no cluster`);
  const server = new URL(cluster.server);
  const options: https.RequestOptions = {};
  await kc.applyToHTTPSOptions(options);
  const path = `/api/v1/nodes/${encodeURIComponent(node)}/proxy/`;
  let lastError: { code: 'NOT_FOUND' | 'UNAVAILABLE'; message: string } | undefined;
  const open = new Set<net.Socket>();
  const listener = net.createServer((local) => {
    open.add(local);
    local.on('error', () => {});
    local.once('close', () => open.delete(local));
    const request = server.protocol === 'http:' ? http.request : https.request;
    const req = request({
      ...options,
      protocol: server.protocol,
      host: server.hostname.replace(/^\[|\]$/g, ''),
      port: server.port || (server.protocol === 'http:' ? 80 : 443),
      method: 'POST',
      path,
      headers: { ...(options.headers ?? {}), Connection: 'Upgrade', Upgrade: TUNNEL_PROTOCOL },
    });
    req.on('upgrade', (_res, remote, head) => {
      open.add(remote as net.Socket);
      remote.on('error', () => local.destroy());
      remote.once('close', () => {
        open.delete(remote as net.Socket);
        local.destroy();
      });
      local.once('close', () => remote.destroy());
      if (head.length > 0) local.write(head);
      local.pipe(remote);
      remote.pipe(local);
    });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        body += d;
      });
      res.on('end', () => {
        let message = `HTTP ${res.statusCode}`;
        try {
          const s = JSON.parse(body) as { message?: string; reason?: string };
          if (s.message) message = `${s.reason ? `${s.reason}: ` : ''}${s.message}`;
        } catch {
          if (body) message = `${message}: ${body.slice(0, 200)}`;
        }
        // A node the cluster does not have (the API server's NotFound for nodes/NAME): no tunnel could
        // ever reach it, so not UNAVAILABLE, which says to try again.
        lastError =
          res.statusCode === 404
            ? { code: 'NOT_FOUND', message: `node ${node} is not in the cluster (${message}): list its nodes with kubectl --kubeconfig ${kubeconfigPath} get nodes` }
            : { code: 'UNAVAILABLE', message: `the cluster refused the tunnel to node ${node}: ${message}` };
        local.destroy();
      });
    });
    req.on('error', (err) => {
      lastError = { code: 'UNAVAILABLE', message: `the cluster at ${cluster.server} did not answer: ${err.message}` };
      local.destroy();
    });
    req.end();
  });
  await new Promise<void>((resolve, reject) => {
    listener.once('error', reject);
    listener.listen(0, '127.0.0.1', () => resolve());
  });
  listener.unref();
  const port = (listener.address() as net.AddressInfo).port;
  return {
    target: `127.0.0.1:${port}`,
    lastError: () => lastError,
    close() {
      listener.close();
      for (const s of open) s.destroy();
    },
  };
}
