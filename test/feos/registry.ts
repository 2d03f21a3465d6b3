// A local OCI registry for FeOS's image tests, offline: Debian's docker-registry on loopback with a
// temporary root, an image built from the machine's busybox with umoci and pushed with skopeo, and a
// token gate in front of it that asks a Bearer token for the repositories under `private/`.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFileSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { unusedPort } from '../helpers/ports.ts';

/** The applets linked in the test image's /bin: every one of the machine's busybox, as docs/feos/feosd.md's image links them. */
function applets(): string[] {
  return execFileSync('/bin/busybox', ['--list'], { encoding: 'utf8' }).split('\n').filter((a) => a !== '' && a !== 'busybox');
}

/**
 * Builds an OCI layout `<dir>/layout` with the image `busybox` (tag 1): the machine's busybox at
 * /bin/busybox and its applets, cmd `/bin/sh`, env FEOS_IMAGE=busybox. Returns the layout's path.
 */
export function buildBusyboxLayout(dir: string): string {
  const layout = join(dir, 'layout');
  const bundle = join(dir, 'bundle');
  const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'], timeout: 60_000 });
  sh('umoci', ['init', '--layout', layout]);
  sh('umoci', ['new', '--image', `${layout}:1`]);
  sh('umoci', ['unpack', '--rootless', '--image', `${layout}:1`, bundle]);
  const bin = join(bundle, 'rootfs', 'bin');
  mkdirSync(bin, { recursive: true });
  mkdirSync(join(bundle, 'rootfs', 'etc'), { recursive: true });
  writeFileSync(join(bundle, 'rootfs', 'etc', 'image-name'), 'busybox\n');
  copyFileSync('/bin/busybox', join(bin, 'busybox'));
  for (const a of applets()) symlinkSync('busybox', join(bin, a));
  sh('umoci', ['repack', '--image', `${layout}:1`, bundle]);
  sh('umoci', ['config', '--image', `${layout}:1`, '--config.cmd', '/bin/sh', '--config.env', 'FEOS_IMAGE=busybox', '--config.env', 'PATH=/bin']);
  return layout;
}

/** A running registry and its token gate. */
export interface LocalRegistry {
  /** The registry itself: `127.0.0.1:<port>` (anonymous). */
  direct: string;
  /** The token gate: `127.0.0.1:<port>`; `private/*` needs `Authorization: Bearer <token>`. */
  gated: string;
  /** Every Authorization header the gate saw (to check what a pull sent). */
  seenAuth: string[];
  /** Every request the gate saw, `METHOD /path`, in order (to check what a pull asked for). */
  seenRequests: string[];
  stop(): Promise<void>;
}

/**
 * Starts docker-registry on a free loopback port with its root in `dir`, and the token gate. The port
 * is below the ephemeral range (test/helpers/ports.ts), and the registry is ready when `/v2/` answers
 * with the header its configuration names with a random value: an answer from another test's
 * registry on that port is never taken for this one's. A port taken before the registry bound it
 * is replaced by another (at most 3 tries).
 * @param token the Bearer token the gate takes for `private/*`
 * @throws Error with the registry's standard error when it does not come up within 30 s
 */
export async function startRegistry(dir: string, token: string): Promise<LocalRegistry> {
  for (let attempt = 1; ; attempt++) {
    const started = await startDockerRegistry(dir, await unusedPort('127.0.0.1'));
    if ('child' in started) return withGate(started.child, started.port, token);
    if (!started.portTaken || attempt === 3) throw new Error(started.message);
  }
}

/** docker-registry serving on `port`, or why it did not start (`portTaken`: its bind failed). */
async function startDockerRegistry(dir: string, port: number): Promise<{ child: ChildProcess; port: number } | { portTaken: boolean; message: string }> {
  const nonce = randomBytes(8).toString('hex');
  const cfg = join(dir, 'registry.yml');
  writeFileSync(
    cfg,
    `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${join(dir, 'registry')}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:${port}\n  headers:\n    X-Feos-Test-Registry: [${nonce}]\n`,
  );
  const child: ChildProcess = spawn('docker-registry', ['serve', cfg], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (c: Buffer) => {
    stderr += c.toString();
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      return { portTaken: /address already in use/i.test(stderr), message: `docker-registry on 127.0.0.1:${port} ended (${child.exitCode ?? child.signalCode}): ${stderr}` };
    }
    const res = await fetch(`http://127.0.0.1:${port}/v2/`, { signal: AbortSignal.timeout(2000) }).catch(() => undefined);
    await res?.body?.cancel();
    // Ours: the header carries this start's value (another registry on the port would not).
    if (res?.ok && res.headers.get('x-feos-test-registry') === nonce && child.exitCode === null) return { child, port };
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      await exited;
      return { portTaken: false, message: `docker-registry on 127.0.0.1:${port} did not answer /v2/ within 30 s: ${stderr}` };
    }
    await new Promise((r) => setTimeout(r, 100)); // poll interval of a readiness check with a deadline
  }
}

/** The token gate in front of the registry on `port`, and the registry's handle. */
async function withGate(child: ChildProcess, port: number, token: string): Promise<LocalRegistry> {
  const seenAuth: string[] = [];
  const seenRequests: string[] = [];
  const gate = http.createServer((req, res) => {
    const auth = req.headers.authorization ?? '';
    seenAuth.push(auth);
    seenRequests.push(`${req.method} ${req.url}`);
    // The token endpoint hands anonymous clients a token that opens public/* only.
    if ((req.url ?? '').startsWith('/token')) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"token":"anonymous"}');
      return;
    }
    if (/^\/v2\/private\//.test(req.url ?? '') && auth !== `Bearer ${token}`) {
      res.writeHead(401, { 'www-authenticate': `Bearer realm="http://${req.headers.host}/token",service="feos-test",scope="repository:private:pull"`, 'content-type': 'application/json' });
      res.end('{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}');
      return;
    }
    const up = http.request({ host: '127.0.0.1', port, path: req.url, method: req.method, headers: { ...req.headers, host: `127.0.0.1:${port}` } }, (ur) => {
      res.writeHead(ur.statusCode ?? 502, ur.headers);
      ur.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((r) => gate.listen(0, '127.0.0.1', r));
  const gatePort = (gate.address() as AddressInfo).port;
  return {
    direct: `127.0.0.1:${port}`,
    gated: `127.0.0.1:${gatePort}`,
    seenAuth,
    seenRequests,
    async stop() {
      gate.closeAllConnections();
      await new Promise<void>((r) => gate.close(() => r()));
      if (child.exitCode === null) {
        const ended = new Promise((r) => child.once('exit', r));
        child.kill('SIGKILL');
        await ended;
      }
    },
  };
}

/**
 * Pushes the layout's image to the registry as `<repo>:<tag>` with skopeo.
 * @param compress the layers' compression on the registry @default "gzip"
 */
export function push(layout: string, registry: string, repo: string, tag: string, compress: 'gzip' | 'zstd' = 'gzip'): void {
  execFileSync(
    'skopeo',
    ['copy', '--quiet', '--dest-tls-verify=false', '--dest-compress-format', compress, '--dest-compress', `oci:${layout}:1`, `docker://${registry}/${repo}:${tag}`],
    { stdio: ['ignore', 'ignore', 'pipe'], timeout: 120_000 },
  );
}
