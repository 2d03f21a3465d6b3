/**
 * A child that must not outlive its parent: `kube32-cli up` starts the control plane, the workers and
 * etcd in process groups of their own (so a Ctrl-C reaches `up` alone), which a SIGKILL of `up` would
 * leave running. Such a child is started with `KUBE32_PARENT_PID=<up's pid>`; {@link watchParent} then
 * checks every second whether its parent is still that process (a dead parent's children are given to
 * init or a subreaper, which changes `process.ppid`) and, once it is not, sends itself SIGTERM: the
 * child stops as it does on a signal (workers drain, the control plane closes).
 */

/** The environment variable that names the parent to watch. */
export const PARENT_PID_ENV = 'KUBE32_PARENT_PID';

/**
 * Starts watching the parent named by `KUBE32_PARENT_PID` (nothing happens without it, or when it is
 * not this process's parent already, e.g. the variable was inherited by a grandchild).
 * @param intervalMs how often to look, ms
 * @returns a stop function
 */
export function watchParent(intervalMs = 1000, env: NodeJS.ProcessEnv = process.env): () => void {
  const want = Number(env[PARENT_PID_ENV]);
  if (!Number.isInteger(want) || want <= 1 || process.ppid !== want) return () => {};
  const timer = setInterval(() => {
    if (process.ppid === want) return;
    clearInterval(timer);
    process.stderr.write(`kube32: the parent process ${want} is gone: stopping\n`);
    process.kill(process.pid, 'SIGTERM');
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
