/**
 * A move's snapshot sent on to its target node while the API server stores it (issue 26, "Faster moves":
 * the target holds the bytes by the time the replacement is bound to it, instead of asking for them only
 * then). `POST .../checkpoints/<name>/data?node=<source>&target=<target>` opens one of these beside the
 * store: each piece read from the source goes to the target kubelet's `POST /restore-data/<ns>/<pod>/
 * <container>/<checkpoint>` as well (staged there, see src/kubelet/staged-restores.ts).
 *
 * Best effort and never on the store's path: a target that cannot be reached, is slow or refuses changes
 * nothing about the store (its errors are logged at debug); a snapshot refused on the way is cut short,
 * so the target drops it. The target restores from its copy only when a conditional GET of the data
 * (`If-None-Match`) says the stored data is those bytes, so the store stays the one source of truth.
 */
import { type ClientRequest, request as httpRequest } from 'node:http';
import { nodes } from '../registry/nodes/index.ts';
import type { ServerContext } from './context.ts';
import { kubeletAddress } from './proxy.ts';

/** Where a push goes: the target node and the restore it is for. */
export interface PushTarget {
  node: string;
  namespace: string;
  pod: string;
  container: string;
  checkpoint: string;
}

/** One push of a snapshot's bytes to a target kubelet. */
export class SnapshotPush {
  readonly #req: ClientRequest;
  #broken = false;

  private constructor(req: ClientRequest) {
    this.#req = req;
  }

  /**
   * Opens the push of a snapshot of `length` bytes. Its SHA-256 is not sent ahead (the source hashes
   * nothing before the bytes): the target takes the snapshot's trailer as its name, and the control
   * plane's ETag (the stored trailer, which this API server checked against the bytes) confirms it.
   * @returns (a Promise of) undefined when the target has no kubelet endpoint (nothing is pushed)
   */
  static async open(ctx: ServerContext, to: PushTarget, length: number): Promise<SnapshotPush | undefined> {
    let addr: { host: string; port: number };
    try {
      addr = kubeletAddress(await ctx.registry.get(nodes, '', to.node));
    } catch (err: unknown) {
      ctx.log.debug({ node: to.node, err: err instanceof Error ? err.message : String(err) }, 'checkpoint data: not pushed to the target');
      return undefined;
    }
    const seg = encodeURIComponent;
    const req = httpRequest({
      host: addr.host,
      port: addr.port,
      method: 'POST',
      path: `/restore-data/${seg(to.namespace)}/${seg(to.pod)}/${seg(to.container)}/${seg(to.checkpoint)}`,
      headers: {
        authorization: `Bearer ${ctx.kubeletToken}`,
        'content-type': 'application/octet-stream',
        'content-length': length,
      },
    });
    const push = new SnapshotPush(req);
    req.on('error', (err) => {
      push.#broken = true;
      ctx.log.debug({ node: to.node, err: err.message }, 'checkpoint data: the push to the target failed');
    });
    req.on('response', (res) => {
      if (res.statusCode !== 200) ctx.log.debug({ node: to.node, status: res.statusCode }, 'checkpoint data: the target refused the push');
      res.resume();
    });
    return push;
  }

  /** Sends `bytes` on (not waiting for the target: the store never waits for it). The caller must not change them. */
  write(bytes: Uint8Array): void {
    if (!this.#broken) this.#req.write(bytes);
  }

  /** Every byte was written: ends the push. */
  end(): void {
    if (!this.#broken) this.#req.end();
  }

  /** The snapshot was refused or cut short: the target gets it cut short, and drops it. */
  abort(): void {
    this.#broken = true;
    this.#req.destroy();
  }
}
