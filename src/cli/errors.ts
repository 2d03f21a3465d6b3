/** Errors of kube32-cli commands. */

/** An error that a command raises to end with a message and a chosen exit code (default 1). */
export class CliError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 1, options?: ErrorOptions) {
    super(message, options);
    this.name = 'CliError';
    this.exitCode = exitCode;
  }
}
