/**
 * kube32-cli commands: `apiserver` (the API server alone), owned by src/apiserver.
 *
 * `kube32-cli apiserver --data-dir D [--port P|0] [--bind 127.0.0.1] [--insecure-http] ...` starts
 * the server and prints one JSON line on standard output once it listens:
 * `{"url":"https://127.0.0.1:PORT","port":PORT,"kubeconfig":"D/kubeconfig"}` (also written to
 * `--listen-file`). It stops on SIGINT/SIGTERM.
 * `kube32-cli apiserver --data-dir D --issue-node-kubeconfig NODE [--out FILE]` writes a kubelet's
 * kubeconfig (user `system:node:NODE`) and prints its path, without starting a server.
 *
 * This file holds the flags and help; the server is loaded only when the command runs
 * (../actions/apiserver.ts).
 */
import { Option, type Command } from 'commander';
import { apiServerClusterOptions } from '../apiserver-flags.ts';
import { dataDirFlag } from '../flags.ts';
import type { ApiServerFlags } from '../actions/apiserver.ts';

/** Adds this file's commands to `program`. */
export function register(program: Command): void {
  const cluster = apiServerClusterOptions();
  program
    .command('apiserver')
    .description('Run the Kube32 API server (Kubernetes-compatible; kubectl works against it)')
    .addOption(new Option('--data-dir <dir>', 'directory of the database (kube32.db), the CA (pki/) and the admin kubeconfig').argParser(dataDirFlag))
    .addOption(new Option('--port <port>', 'TCP port; 0 picks a free one: the one this data dir had last, while it is free (node kubeconfigs name it)').default('6443'))
    .addOption(new Option('--bind <address>', 'address to listen on').default('127.0.0.1'))
    .addOption(new Option('--storage <kind>', 'object store').choices(['sqlite', 'memory', 'etcd']).default('sqlite'))
    .addOption(new Option('--etcd-endpoints <urls>', 'with --storage etcd: etcd client URLs, comma-separated (http://127.0.0.1:2379,...)'))
    .addOption(new Option('--insecure-http', 'serve plain HTTP (loopback only); requests without a token act as the admin'))
    .addOption(new Option('--checkpoint-data-bytes <quantity>', 'memory for all checkpoint snapshots (e.g. 16Mi)').default('16Mi'))
    .addOption(new Option('--max-body-bytes <quantity>', 'limit of a request body').default('3Mi'))
    .addOption(new Option('--max-module-bytes <quantity>', 'limit of a module upload').default('64Mi'))
    .addOption(new Option('--headers-timeout <duration>', 'time a connection has to send a request header before it is closed (kube-apiserver: 32s)').default('32s'))
    .addOption(new Option('--watch-window <events>', 'events kept in memory for watches to resume from (older resourceVersions get 410 Expired)').default('50000'))
    .addOption(new Option('--watch-buffer-bytes <quantity>', 'bytes a watcher may leave unsent before its watch is ended as too slow (its client watches again)').default('8Mi'))
    .addOption(new Option('--event-ttl <duration>', 'a core event is deleted this long after its last write, as kube-apiserver (0s keeps them)').default('1h'))
    .addOption(new Option('--listen-file <file>', 'also write the JSON line with the URL and kubeconfig to this file'))
    .addOption(new Option('--cert-san <name...>', 'extra DNS names or IP addresses for the serving certificate').default([]))
    .addOption(cluster[0]!)
    .addOption(cluster[1]!)
    .addOption(cluster[2]!)
    .addOption(cluster[3]!)
    .addOption(new Option('--issue-node-kubeconfig <node>', "write a kubelet's kubeconfig for NODE (user system:node:NODE), print its path and exit"))
    .addOption(new Option('--out <file>', 'with --issue-node-kubeconfig: where to write it (default <data-dir>/nodes/<node>.kubeconfig)'))
    .action(async (flags: ApiServerFlags) => {
      const { apiserver } = await import('../actions/apiserver.ts');
      await apiserver(flags);
    });
}
