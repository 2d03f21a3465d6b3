/**
 * kube32-cli commands: `apiserver` (the API server alone), owned by src/apiserver.
 *
 * `kube32-cli apiserver --data-dir D [--port P|0] [--bind 127.0.0.1] [--insecure-http] ...` starts
 * the server and prints one JSON line on standard output once it listens:
 * `{"url":"https://127.0.0.1:PORT","port":PORT,"kubeconfig":"D/kubeconfig"}` (also written to
 * `--listen-file`). It stops on SIGINT/SIGTERM.
 * `kube32-cli apiserver --data-dir D --issue-node-kubeconfig NODE [--out FILE]` writes a kubelet's
 * kubeconfig (user `system:node:NODE`) and prints its path, without starting a server.
 */
import { Option, type Command } from 'commander';
import { parseBytes, parseDuration, writeFileAtomic } from '../../lib/index.ts';
import { createApiServer, issueNodeKubeconfig } from '../../apiserver/index.ts';
import { CliError } from '../errors.ts';

interface Flags {
  dataDir?: string;
  port: string;
  bind: string;
  storage: string;
  etcdEndpoints?: string;
  insecureHttp?: boolean;
  checkpointDataBytes: string;
  maxBodyBytes: string;
  maxModuleBytes: string;
  listenFile?: string;
  certSan: string[];
  watchWindow: string;
  eventTtl: string;
  issueNodeKubeconfig?: string;
  out?: string;
}

/** Adds this file's commands to `program`. */
export function register(program: Command): void {
  program
    .command('apiserver')
    .description('Run the Kube32 API server (Kubernetes-compatible; kubectl works against it)')
    .addOption(new Option('--data-dir <dir>', 'directory of the database (kube32.db), the CA (pki/) and the admin kubeconfig'))
    .addOption(new Option('--port <port>', 'TCP port; 0 picks a free one').default('6443'))
    .addOption(new Option('--bind <address>', 'address to listen on').default('127.0.0.1'))
    .addOption(new Option('--storage <kind>', 'object store').choices(['sqlite', 'memory', 'etcd']).default('sqlite'))
    .addOption(new Option('--etcd-endpoints <urls>', 'with --storage etcd: etcd client URLs, comma-separated (http://127.0.0.1:2379,...)'))
    .addOption(new Option('--insecure-http', 'serve plain HTTP (loopback only); requests without a token act as the admin'))
    .addOption(new Option('--checkpoint-data-bytes <quantity>', 'memory for all checkpoint snapshots (e.g. 16Mi)').default('16Mi'))
    .addOption(new Option('--max-body-bytes <quantity>', 'limit of a request body').default('3Mi'))
    .addOption(new Option('--max-module-bytes <quantity>', 'limit of a module upload').default('64Mi'))
    .addOption(new Option('--watch-window <events>', 'events kept in memory for watches to resume from (older resourceVersions get 410 Expired)').default('50000'))
    .addOption(new Option('--event-ttl <duration>', 'core events older than this are deleted (0s keeps them)').default('1h'))
    .addOption(new Option('--listen-file <file>', 'also write the JSON line with the URL and kubeconfig to this file'))
    .addOption(new Option('--cert-san <name...>', 'extra DNS names or IP addresses for the serving certificate').default([]))
    .addOption(new Option('--issue-node-kubeconfig <node>', "write a kubelet's kubeconfig for NODE (user system:node:NODE), print its path and exit"))
    .addOption(new Option('--out <file>', 'with --issue-node-kubeconfig: where to write it (default <data-dir>/nodes/<node>.kubeconfig)'))
    .action(async (flags: Flags) => {
      if (flags.issueNodeKubeconfig !== undefined) {
        if (!flags.dataDir) throw new CliError('--issue-node-kubeconfig needs --data-dir');
        process.stdout.write(`${issueNodeKubeconfig(flags.dataDir, flags.issueNodeKubeconfig, { path: flags.out })}\n`);
        return;
      }
      const port = Number(flags.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw new CliError(`--port must be a TCP port (0-65535): current value is ${flags.port}`);
      const watchWindow = Number(flags.watchWindow);
      if (!Number.isInteger(watchWindow) || watchWindow < 1) throw new CliError(`--watch-window must be a positive number of events: current value is ${flags.watchWindow}`);
      let eventTtlMs: number;
      try {
        eventTtlMs = parseDuration(flags.eventTtl);
      } catch (err: unknown) {
        throw new CliError(`--event-ttl: ${err instanceof Error ? err.message : String(err)}`);
      }
      let sizes: number[];
      try {
        sizes = [parseBytes(flags.checkpointDataBytes), parseBytes(flags.maxBodyBytes), parseBytes(flags.maxModuleBytes)];
      } catch (err: unknown) {
        throw new CliError(err instanceof Error ? err.message : String(err));
      }
      let server: Awaited<ReturnType<typeof createApiServer>>;
      try {
        server = await createApiServer({
          dataDir: flags.dataDir,
          port,
          bindAddress: flags.bind,
          storage: flags.storage as 'sqlite' | 'memory' | 'etcd',
          etcdEndpoints: flags.etcdEndpoints?.split(',').filter(Boolean),
          insecureHttp: flags.insecureHttp === true,
          checkpointDataBytes: sizes[0],
          maxBodyBytes: sizes[1],
          maxModuleBytes: sizes[2],
          certificateSans: flags.certSan,
          watchWindow,
          eventTtlMs,
        });
      } catch (err: unknown) {
        throw new CliError(err instanceof Error ? err.message : String(err), 1, { cause: err });
      }
      const line = `${JSON.stringify({ url: server.url, port: server.port, kubeconfig: server.kubeconfigPath ?? null })}\n`;
      if (flags.listenFile) await writeFileAtomic(flags.listenFile, line);
      process.stdout.write(line);
      await new Promise<void>((resolve) => {
        const stop = () => {
          process.off('SIGINT', stop);
          process.off('SIGTERM', stop);
          void server.close().then(resolve);
        };
        process.on('SIGINT', stop);
        process.on('SIGTERM', stop);
      });
    });
}
