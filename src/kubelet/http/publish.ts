/** `POST /publish/<ns>/<topic>`: a channel message from another node, for this node's subscribed pods. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { EndpointError } from './status.ts';

/** The largest channel message: 4 KiB (pod-abi.md `k32_channel_send`). */
export const MAX_MESSAGE_BYTES = 4096;

/**
 * Reads the message (at most {@link MAX_MESSAGE_BYTES}) and hands it to `deliver`; answers 202 `{"delivered":n}`.
 * @throws EndpointError 413 `RequestEntityTooLarge` for a longer message
 */
export async function servePublish(req: IncomingMessage, res: ServerResponse, ns: string, topic: string, deliver: (namespace: string, topic: string, payload: Uint8Array) => number): Promise<void> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > MAX_MESSAGE_BYTES) throw new EndpointError(413, 'RequestEntityTooLarge', `a channel message is at most ${MAX_MESSAGE_BYTES} bytes`);
    chunks.push(c);
  }
  const delivered = deliver(ns, topic, new Uint8Array(Buffer.concat(chunks)));
  const body = JSON.stringify({ delivered });
  res.writeHead(202, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
}
