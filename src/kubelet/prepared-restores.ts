/**
 * The restore of a move's snapshot prepared while the API server pushes it here (issue 26, "Faster
 * moves"; see staged-restores.ts): the pod the move replaces is read (its replacement has the same
 * spec, bound to this node), its module and configuration resolved as the replacement's will be, and
 * a pod thread writes the snapshot into a new instance as the pieces arrive
 * (`PodInstance.prepareRestore`). Nothing of the pod runs until the replacement's container commits it,
 * once the control plane has answered that its stored data is those bytes (304), which is after the
 * data is durable there and the replacement written.
 *
 * Best effort: a pod that is gone, an image or configuration that cannot be resolved (a ConfigMap this
 * node may not read yet), a module with a start function: nothing is prepared, and the restore uses
 * the staged bytes or fetches the data as before.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { type Logger, pauseAt } from '../lib/index.ts';
import { PodInstance, type PreparedRestore } from '../wasm/index.ts';
import { type ControlPlane, errorMessage } from './client.ts';
import { type LoadedModules, resolveImageDigest } from './modules.ts';
import { memoryLimitBytes, resolveContainerConfig } from './pod-spec.ts';
import type { PrepareHook, StagedAt } from './staged-restores.ts';

/** What preparing a restore needs of the node. */
export interface PrepareContext {
  cp: ControlPlane;
  modules: LoadedModules;
  nodeName: string;
  address: string;
  log: Logger;
}

/** The node's {@link PrepareHook}: see the file's comment. */
export function prepareHook(ctx: PrepareContext): PrepareHook {
  return async (at: StagedAt, pieces: AsyncIterable<Uint8Array>): Promise<PreparedRestore | undefined> => {
    try {
      const old = await ctx.cp.json<V1Pod>('GET', `/api/v1/namespaces/${encodeURIComponent(at.ns)}/pods/${encodeURIComponent(at.pod)}`);
      const spec = old.spec?.containers?.find((c) => c.name === at.container);
      if (!spec) return undefined;
      // As the replacement will be: the same spec, bound here.
      const here: V1Pod = { ...old, spec: { ...old.spec!, nodeName: ctx.nodeName } };
      const digest = await resolveImageDigest(ctx.cp, here, spec.image ?? '');
      const module = await ctx.modules.get(digest, memoryLimitBytes(spec));
      const config = await resolveContainerConfig(ctx.cp, here, spec, ctx.address);
      const prepared = await PodInstance.prepareRestore({
        module,
        namespace: at.ns,
        podName: at.pod,
        containerName: at.container,
        env: config.env,
        assets: config.assets,
        memoryLimitBytes: config.memoryLimitBytes,
        restoreFrom: pieces,
        restoreTransfer: true,
      });
      ctx.log.debug({ pod: `${at.ns}/${at.pod}`, container: at.container, checkpoint: at.checkpoint }, 'restore: prepared while the snapshot arrives');
      // The container's restore commits it only once written (a failure there is its own to report).
      await prepared.restored.catch(() => {});
      await pauseAt('kubelet-prepared'); // test-only (src/lib/test-pause.ts)
      return prepared;
    } catch (err: unknown) {
      ctx.log.debug({ pod: `${at.ns}/${at.pod}`, container: at.container, checkpoint: at.checkpoint, err: errorMessage(err) }, 'restore: not prepared');
      return undefined;
    }
  };
}
