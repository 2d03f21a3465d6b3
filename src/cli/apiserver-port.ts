/**
 * The API server's port kept across restarts of a data dir's `control-plane` or `apiserver`: the
 * port it listened on is written to `DIR/apiserver-port.json`, and `--port 0` ("any free port") means
 * that port again when it is free. So the kubeconfigs minted for nodes (`--issue-node-kubeconfig`,
 * `up`), which name the server's URL, stay right when the control plane restarts, and workers that
 * run through the restart reconnect to the address they know. An explicit `--port P` is always P.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomicSync } from '../lib/index.ts';

/** The file in the data dir: `{"port":N}`. */
export const PORT_FILE = 'apiserver-port.json';

/** The port this data dir's API server listened on last, or undefined (none yet, or a file that is not ours). */
export function rememberedPort(dataDir: string): number | undefined {
  try {
    const port = (JSON.parse(readFileSync(join(dataDir, PORT_FILE), 'utf8')) as { port?: unknown }).port;
    return typeof port === 'number' && Number.isInteger(port) && port > 0 && port <= 65535 ? port : undefined;
  } catch {
    return undefined;
  }
}

/** Whether `err` (or its cause) is a listen that failed because the address is in use. */
function inUse(err: unknown): boolean {
  for (let e: unknown = err; e instanceof Error; e = e.cause) if ((e as NodeJS.ErrnoException).code === 'EADDRINUSE') return true;
  return false;
}

/**
 * Starts a server on the port the user asked for (`requested`, from `--port`), and records the port
 * it listens on in `dataDir`. With `requested` 0 and a port recorded, that port is tried first; when
 * something else listens there, `warn` is told (the node kubeconfigs issued before name the old port)
 * and the server starts on a port the OS picks.
 * @param start starts the server on a port (0: any), or throws (a listen error carries `EADDRINUSE`
 *   in its `cause` chain); it must leave nothing behind when it throws
 * @param warn one line for standard error, without a trailing newline
 * @throws what `start` throws, but for an in-use remembered port
 */
export async function listenKeepingPort<S extends { port: number }>(
  dataDir: string | undefined,
  requested: number,
  start: (port: number) => Promise<S>,
  warn: (line: string) => void,
): Promise<S> {
  const remembered = requested === 0 && dataDir ? rememberedPort(dataDir) : undefined;
  let server: S | undefined;
  if (remembered !== undefined) {
    try {
      server = await start(remembered);
    } catch (err: unknown) {
      if (!inUse(err)) throw err;
      warn(
        `warning: port ${remembered}, where this data dir's API server listened until now, is in use: listening on another. ` +
          `Node kubeconfigs issued before name port ${remembered}: issue them again (kube32-cli apiserver --data-dir ${dataDir} --issue-node-kubeconfig NODE), or restart with --port ${remembered} once it is free`,
      );
    }
  }
  server ??= await start(requested);
  if (dataDir && server.port !== remembered) writeFileAtomicSync(join(dataDir, PORT_FILE), `${JSON.stringify({ port: server.port })}\n`);
  return server;
}
