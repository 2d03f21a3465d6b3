/**
 * kube32-cli commands: `control-plane`, owned by src/controllers: the API server and every controller in
 * ONE process. The API server runs in-process (`createApiServer`); the controllers are REST clients of it
 * with the admin identity of the kubeconfig it writes, exactly as they would be of a remote one.
 *
 * `kube32-cli control-plane --data-dir D [--port P|0] [--bind ADDR] [--advertise-address IP] [--checkpoint-data-bytes Q]
 *   [--node-monitor-grace-period 40s] [--pod-eviction-timeout 5m] [--node-loss-restore-delay 5s] [--move-timeout 60s]
 *   [--checkpoint-retention 1h] [--horizontal-pod-autoscaler-sync-period 15s] [--horizontal-pod-autoscaler-downscale-stabilization 5m]
 *   [--horizontal-pod-autoscaler-tolerance 0.1] [--horizontal-pod-autoscaler-cpu-initialization-period 5m]
 *   [--horizontal-pod-autoscaler-initial-readiness-delay 30s] [--leader-elect[=true|false] [--leader-elect-identity NAME]] [--listen-file F]
 *   [--feos-listen ADDRESS:PORT [--feos-server-name NAME...] [--feos-advertise-address HOST:PORT] [--trust-domain feos.local]
 *    [--feos-node-cert-ttl 24h]]`  (the port for FeOS nodes: ../feos-flags.ts, docs/feos/fleet.md)
 *
 * `--leader-elect` defaults to true with `--storage etcd` (as kube-controller-manager's), false with sqlite.
 *
 * Once the API server listens and the controllers' caches have synced it prints one JSON line on standard
 * output, as `apiserver` does: `{"url":"https://127.0.0.1:PORT","port":PORT,"kubeconfig":"D/kubeconfig"}`, with
 * `"feos":"ADDRESS:PORT"` added when `--feos-listen` is given.
 * SIGINT/SIGTERM stop the controllers, then the API server.
 *
 * This file holds the flags and help; the code, and the API server, the controllers and the Kubernetes
 * client with it, is loaded only when `control-plane` runs (../actions/control-plane.ts).
 */
import { InvalidArgumentError, Option, type Command } from 'commander';
import { apiServerClusterOptions } from '../apiserver-flags.ts';
import { dataDirFlag } from '../flags.ts';
import { feosPortOptions } from '../feos-flags.ts';
import type { ControlPlaneFlags } from '../actions/control-plane.ts';

/** A `[bool]` flag's value (`--leader-elect`, `--push-snapshots-to-target`): absent (the flag alone) or `true` is true, `false` is false. */
function parseBool(value: string | undefined): boolean {
  if (value === undefined || value === 'true') return true;
  if (value === 'false') return false;
  throw new InvalidArgumentError(`must be true or false: current value is ${value}`);
}

/** Adds this file's commands to `program`. */
export function register(program: Command): void {
  const cluster = apiServerClusterOptions();
  const cmd = program
    .command('control-plane')
    .description('Run the Kube32 control plane: the API server and the controllers (scheduler, moves, drain, policies, checkpoints) in one process')
    .addOption(new Option('--data-dir <dir>', 'directory of the database, the CA and the admin kubeconfig').makeOptionMandatory().argParser(dataDirFlag))
    .addOption(new Option('--storage <kind>', 'object store: sqlite (<data-dir>/kube32.db) or etcd (several control planes on one cluster)').choices(['sqlite', 'etcd']).default('sqlite'))
    .addOption(new Option('--etcd-endpoints <urls>', 'with --storage etcd: etcd client URLs, comma-separated (http://127.0.0.1:2379,...)'))
    .addOption(new Option('--port <port>', 'TCP port of the API server; 0 picks a free one: the one this data dir had last, while it is free (node kubeconfigs name it)').default('6443'))
    .addOption(new Option('--bind <address>', 'address to listen on').default('127.0.0.1'))
    .addOption(new Option('--checkpoint-data-bytes <quantity>', 'memory for all checkpoint snapshots (e.g. 16Mi)').default('16Mi'))
    .addOption(new Option('--node-monitor-grace-period <duration>', 'a node that does not renew its Lease for this long turns NotReady (Unknown)').default('40s'))
    .addOption(new Option('--pod-eviction-timeout <duration>', 'pods of an unreachable node are evicted this long after it turned Unknown').default('5m'))
    .addOption(new Option('--node-loss-restore-delay <duration>', 'pods of an unreachable node with a Saved periodic checkpoint restore elsewhere this long after it turned Unknown (its kube32-sim worker fenced them)').default('5s'))
    .addOption(new Option('--move-timeout <duration>', "a move's replacement that does not run within this rolls back").default('60s'))
    .addOption(new Option('--push-snapshots-to-target [bool]', "send a move's snapshot on to its target node while it is stored, where its restore is prepared as the bytes arrive (docs/checkpoints.md, Figures); --push-snapshots-to-target=false turns it off").argParser(parseBool).default(true))
    .addOption(new Option('--checkpoint-retention <duration>', 'finished Checkpoints (other than the latest periodic ones) go after this').default('1h'))
    .addOption(new Option('--horizontal-pod-autoscaler-sync-period <duration>', 'how often each HorizontalPodAutoscaler is synced').default('15s'))
    .addOption(new Option('--horizontal-pod-autoscaler-downscale-stabilization <duration>', 'an HPA without behavior scales down to the highest recommendation of this window').default('5m'))
    .addOption(new Option('--horizontal-pod-autoscaler-tolerance <fraction>', 'an HPA does not scale while usage is within this fraction of its target').default('0.1'))
    .addOption(new Option('--horizontal-pod-autoscaler-cpu-initialization-period <duration>', 'a pod younger than this counts toward CPU only once Ready with a window of metrics since').default('5m'))
    .addOption(new Option('--horizontal-pod-autoscaler-initial-readiness-delay <duration>', 'a pod not Ready this long after its start has never been Ready').default('30s'))
    .addOption(new Option('--cert-san <name...>', 'extra DNS names or IP addresses for the serving certificate').default([]))
    .addOption(cluster[0]!)
    .addOption(cluster[1]!)
    .addOption(cluster[2]!)
    .addOption(cluster[3]!)
    .addOption(
      new Option(
        '--leader-elect [bool]',
        'run the controllers only while holding the Lease kube-system/kube32-controllers (several control planes on one cluster); default true with --storage etcd, false with sqlite; --leader-elect=false opts out',
      ).argParser(parseBool),
    )
    .addOption(new Option('--leader-elect-identity <name>', 'this control plane\'s name in the Lease (default: host, pid and a random suffix)'))
    .addOption(new Option('--listen-file <file>', 'also write the JSON line with the URL and kubeconfig to this file'));
  for (const o of feosPortOptions()) cmd.addOption(o);
  cmd.action(async (flags: ControlPlaneFlags) => {
      const { controlPlane } = await import('../actions/control-plane.ts');
      await controlPlane(flags);
    });
}
