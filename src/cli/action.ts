/**
 * Runs a command's action with kubectl's error conventions: an API server refusal prints
 * `Error from server (<reason>): <message>`, and an unreachable server `The connection to the server ...
 * was refused - did you specify the right host or port?`, on standard error as kubectl does (no
 * `error:` prefix), and
 * every failure sets exit code 1 (or the `CliError`'s own). Other errors go to `main`, which prints
 * `error: <message>`.
 */
import { ApiError, ConnectionError, kubectlMessage } from './api-client.ts';

/**
 * Wraps an async command action.
 * @param action commander's action function
 * @returns an action that never lets an `ApiError` or `ConnectionError` reach commander
 */
export function kubectlAction<A extends unknown[]>(action: (...args: A) => Promise<void>): (...args: A) => Promise<void> {
  return async function runKubectlAction(...args: A): Promise<void> {
    try {
      await action(...args);
    } catch (err: unknown) {
      if (err instanceof ApiError) {
        process.stderr.write(`${kubectlMessage(err)}\n`);
        process.exitCode = 1;
        return;
      }
      if (!(err instanceof ConnectionError)) throw err;
      process.stderr.write(`${err.message}\n`);
      process.exitCode = err.exitCode;
    }
  };
}
