/**
 * Structured logs (pino, JSON lines on standard error) for the daemons: the API server, the
 * controllers, kube32-sim, feosd. `LOG_LEVEL` sets the level (default `info`).
 */
import { pino, type Logger } from 'pino';

export type { Logger };

/**
 * Makes the logger of one component.
 * @param component its name, in every line as `component`
 * @param bindings more fields for every line (a node's name, say)
 */
export function createLogger(component: string, bindings: Record<string, unknown> = {}): Logger {
  return pino(
    { level: process.env.LOG_LEVEL ?? 'info', base: { component, ...bindings } },
    pino.destination({ dest: 2, sync: true }),
  );
}
