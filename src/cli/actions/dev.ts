/**
 * `kube32-cli dev MODULE.wasm`: runs one pod on this computer, serving its HTTP on a port as a node
 * would (pod-abi.md; issue 3, "For pod authors"). Loaded only when `dev` runs (its flags and help are in
 * ../commands/dev.ts), so that `--help` and the other commands do not load the WebAssembly runtime.
 *
 * Standard output carries the pod's log lines; standard error the runner's own messages, among them
 * `serving <name> on http://HOST:PORT` once the pod is ready. With `--save-on-exit FILE`, SIGINT or
 * SIGTERM freezes the pod and writes its K32S snapshot (whole or absent); `--restore FILE` starts from one.
 */
import { randomBytes } from 'node:crypto';
import { constants, createReadStream } from 'node:fs';
import { access, mkdtemp, open, readFile, rename, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { parseBytes, parseDuration, parseTimerDuration } from '../../lib/index.ts';
import { ModuleError, PodInstance, PodStartError, PodStateError, loadModule, serveHttp, type PodModule } from '../../wasm/index.ts';
import { CliError } from '../errors.ts';

/** `dev`'s flags as commander parses them (strings as typed; `env` collects every `-e KEY=VALUE`). */
export interface DevFlags {
  port: string;
  address: string;
  env: string[];
  tickInterval?: string;
  topics?: string;
  memoryLimit: string;
  restore?: string;
  saveOnExit?: string;
  fsDir?: string;
  fsLimit?: string;
  name?: string;
  freezeTimeout: string;
}

function parseFlags(file: string, flags: DevFlags) {
  // Digits only: Number('') is 0, which would listen on a port picked at random.
  const port = /^\d+$/.test(String(flags.port)) ? Number(flags.port) : Number.NaN;
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new CliError(`--port must be 0 to 65535: got ${JSON.stringify(flags.port)}`);
  const env: Record<string, string> = {};
  for (const kv of flags.env) {
    const eq = kv.indexOf('=');
    if (eq <= 0) throw new CliError(`--env ${JSON.stringify(kv)}: expected KEY=VALUE`);
    env[kv.slice(0, eq)] = kv.slice(eq + 1);
  }
  const num = (what: string, f: () => number): number => {
    try {
      return f();
    } catch (err: unknown) {
      throw new CliError(`${what}: ${err instanceof Error ? err.message : String(err)}`);
    }
  };
  const tickIntervalMs = flags.tickInterval ? num('--tick-interval', () => parseTimerDuration(flags.tickInterval!)) : 0;
  const memoryLimitBytes = num('--memory-limit', () => parseBytes(flags.memoryLimit));
  const fsLimitBytes = flags.fsLimit === undefined ? undefined : num('--fs-limit', () => parseBytes(flags.fsLimit!));
  if (memoryLimitBytes < 1) throw new CliError('--memory-limit must be at least 1 byte');
  const freezeTimeoutMs = Math.round(num('--freeze-timeout', () => parseDuration(flags.freezeTimeout)));
  if (freezeTimeoutMs < 1 || freezeTimeoutMs > 60_000) throw new CliError('--freeze-timeout must be 1ms to 60s');
  const topics = (flags.topics ?? '').split(',').map((t) => t.trim()).filter((t) => t.length > 0);
  const name = flags.name ?? basename(file).replace(/\.wasm$/, '').toLowerCase().replace(/[^a-z0-9-]+/g, '-');
  return { port, env, tickIntervalMs, memoryLimitBytes, fsLimitBytes, freezeTimeoutMs, topics, name };
}

/**
 * Runs the pod of `file` until SIGINT or SIGTERM (saving its snapshot first with `--save-on-exit`) or
 * until the pod ends by itself.
 * @param file the pod's WebAssembly module (.wasm)
 * @param flags the command line's flags, checked here
 * @throws CliError for a bad flag, an unreadable or invalid module or snapshot, a port that cannot be
 *   had, a start that failed or was cancelled (exit code 130 for SIGINT, 143 for SIGTERM), or a pod
 *   that ended with a non-zero exit code (that code)
 */
export async function dev(file: string, flags: DevFlags): Promise<void> {
  const opts = parseFlags(file, flags);
  let bytes: Uint8Array;
  try {
    bytes = await readFile(file);
  } catch (err: unknown) {
    throw new CliError(`${file}: cannot read it: ${fileErrorText(err as NodeJS.ErrnoException)}`);
  }
  let module: PodModule;
  try {
    module = await loadModule(bytes, { memoryLimitBytes: opts.memoryLimitBytes });
  } catch (err: unknown) {
    if (err instanceof ModuleError) throw new CliError(`${file}: ${err.message}`, 1, { cause: err });
    throw err;
  }
  if (flags.restore) {
    try {
      await access(flags.restore, constants.R_OK);
    } catch (err: unknown) {
      const code = (err as NodeJS.ErrnoException).code;
      throw new CliError(`${flags.restore}: ${code === 'ENOENT' ? 'no such file' : `cannot read it: ${fileErrorText(err as NodeJS.ErrnoException)}`}`);
    }
  }
  if (flags.saveOnExit) {
    // Found out now, not at Ctrl-C after an hour of work.
    const dir = dirname(flags.saveOnExit);
    try {
      await access(dir, constants.W_OK);
    } catch (err: unknown) {
      const code = (err as NodeJS.ErrnoException).code;
      throw new CliError(`--save-on-exit ${flags.saveOnExit}: ${code === 'ENOENT' ? `no such directory ${dir}` : `cannot write in ${dir} (${code})`}`);
    }
  }
  const say = (line: string): void => {
    process.stderr.write(`${line}\n`);
  };
  // The port first: when it cannot be had, no pod starts (its k32_init runs only once it is served).
  let pod: PodInstance | undefined;
  const server: Server = createServer(serveHttp(() => pod, { onError: (m) => say(m) }));
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(opts.port, flags.address, () => resolve());
    });
  } catch (err: unknown) {
    throw new CliError(`cannot listen on ${flags.address}:${opts.port}: ${listenErrorText(err as NodeJS.ErrnoException)}`, 1, { cause: err });
  }
  const fsDir = flags.fsDir ?? (await mkdtemp(join(tmpdir(), `kube32-dev-${opts.name}-`)));
  const topics = new Set(opts.topics);
  // Ctrl-C while the pod starts (a long restore, a k32_init that takes its time) cancels the start
  // and still cleans up.
  const starting = new AbortController();
  let cancelCode = 130;
  const cancelStart = (signal: NodeJS.Signals): void => {
    if (starting.signal.aborted) return;
    say(`${signal}: cancelling the start of ${opts.name}`);
    cancelCode = signal === 'SIGTERM' ? 143 : 130;
    starting.abort();
  };
  process.on('SIGINT', cancelStart);
  process.on('SIGTERM', cancelStart);
  try {
    pod = await PodInstance.start({
      signal: starting.signal,
      module,
      namespace: 'default',
      podName: opts.name,
      containerName: opts.name,
      env: opts.env,
      tickIntervalMs: opts.tickIntervalMs,
      topics: opts.topics,
      fsDir,
      ...(opts.fsLimitBytes !== undefined ? { fsLimitBytes: opts.fsLimitBytes } : {}),
      onLog: (e) => process.stdout.write(`${e.line}\n`),
      onChannelSend: (topic, payload) => {
        say(`channel ${topic}: ${payload.length} bytes`);
        if (topics.has(topic)) pod?.event(topic, payload);
      },
      ...(flags.restore ? { restoreFrom: createReadStream(flags.restore) } : {}),
    });
  } catch (err: unknown) {
    server.close();
    server.closeAllConnections();
    if (!flags.fsDir) await rm(fsDir, { recursive: true, force: true });
    if (starting.signal.aborted) throw new CliError(`${opts.name}: the start was cancelled`, cancelCode, { cause: err });
    if (err instanceof PodStartError) throw new CliError(`${opts.name}: ${err.reason}: ${err.message}`, 1, { cause: err });
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new CliError(`${flags.restore}: no such file`);
    throw err;
  } finally {
    process.off('SIGINT', cancelStart);
    process.off('SIGTERM', cancelStart);
  }
  const running = pod;
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : opts.port;
  const how = flags.restore ? `restored from ${flags.restore} at pod time ${running.podTimeMs} ms` : 'started afresh';
  say(`${opts.name}: ${module.kind} pod, image sha256:${module.imageSha256}, ${how}`);
  say(`serving ${opts.name} on http://${flags.address}:${port}`);

  const done = Promise.withResolvers<number>();
  let stopping = false;
  let saving = false;
  const stop = async (signal: string): Promise<void> => {
    if (stopping) {
      // A second Ctrl-C while the snapshot waits (a call that does not return): end without it.
      if (saving) {
        saving = false;
        say(`${signal} again: ending ${opts.name} without saving`);
        void running.terminate();
      }
      return;
    }
    stopping = true;
    say(`${signal}: stopping ${opts.name}${flags.saveOnExit ? ` (saving ${flags.saveOnExit}; press Ctrl-C again to end without saving)` : ''}`);
    let code = 0;
    if (flags.saveOnExit && !running.exit) {
      saving = true;
      try {
        await saveSnapshot(running, flags.saveOnExit, opts.freezeTimeoutMs, say);
      } catch (err: unknown) {
        const blockers = err instanceof PodStateError && err.blockers.length > 0 ? ` (blockers: ${err.blockers.join('; ')})` : '';
        say(`cannot save the snapshot: ${err instanceof Error ? err.message : String(err)}${blockers}`);
        code = 1;
      }
      saving = false;
    }
    server.close();
    server.closeAllConnections();
    await running.terminate();
    if (!flags.fsDir) await rm(fsDir, { recursive: true, force: true });
    done.resolve(code);
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    void stop(signal);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  void running.exited.then((exit) => {
    if (stopping) return;
    say(`${opts.name} ended: ${exit.reason}: ${exit.message}`);
    stopping = true;
    server.close();
    server.closeAllConnections();
    void (flags.fsDir ? Promise.resolve() : rm(fsDir, { recursive: true, force: true })).then(() => done.resolve(exit.exitCode));
  });
  const code = await done.promise;
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  if (code !== 0) throw new CliError(`${opts.name} ended with exit code ${code}`, code);
}

/** Why a file could not be read, in words, with the system's code. */
function fileErrorText(err: NodeJS.ErrnoException): string {
  switch (err.code) {
    case 'ENOENT':
      return 'no such file';
    case 'EISDIR':
      return 'it is a directory (EISDIR)';
    case 'EACCES':
      return 'permission denied (EACCES)';
    default:
      return err.message;
  }
}

/** Why a listen failed, in words, with the system's code (EADDRINUSE, EADDRNOTAVAIL, EACCES...). */
function listenErrorText(err: NodeJS.ErrnoException): string {
  switch (err.code) {
    case 'EADDRINUSE':
      return 'the port is in use (EADDRINUSE); choose another with --port, or --port 0 for any free one';
    case 'EADDRNOTAVAIL':
      return 'no interface of this computer has that address (EADDRNOTAVAIL); see --address';
    case 'EACCES':
      return 'permission denied (EACCES): ports below 1024 need privileges';
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `the address does not resolve (${err.code}); see --address`;
    default:
      return err.message;
  }
}

/**
 * Freezes the pod, streams its snapshot into a temporary file beside `path` (fsync), and renames
 * it over `path` (then fsyncs the directory): the file is whole or absent.
 */
async function saveSnapshot(pod: PodInstance, path: string, timeoutMs: number, say: (line: string) => void): Promise<void> {
  await pod.freeze(timeoutMs);
  const snap = await pod.snapshot();
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  const fh = await open(tmp, 'w', 0o600);
  let written = 0;
  let last: Uint8Array = new Uint8Array(0);
  try {
    for await (const chunk of snap.chunks) {
      await fh.write(chunk);
      written += chunk.length;
      last = chunk;
    }
    await fh.sync();
  } catch (err: unknown) {
    await fh.close();
    await rm(tmp, { force: true });
    throw err;
  }
  await fh.close();
  if (written !== snap.byteLength) {
    await rm(tmp, { force: true });
    throw new Error(`the snapshot has ${written} bytes, expected ${snap.byteLength}`);
  }
  await rename(tmp, path);
  const dir = await open(dirname(path), 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
  const trailer = Buffer.from(last.subarray(Math.max(0, last.length - 32))).toString('hex');
  say(`saved ${path}: ${snap.byteLength} bytes, sha256:${trailer}, pod time ${snap.podTimeMs} ms`);
}
