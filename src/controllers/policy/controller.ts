/** The Auto policy's wiring: nodes → `node:<name>` (memory pressure) and every `fastest` pod; pods → both keys. */
import type { V1Pod } from '@kubernetes/client-node';
import type { Informers } from '../runtime/cache.ts';
import { Controller, keyOf } from '../runtime/controller.ts';
import type { ControllerContext } from '../runtime/context.ts';
import { migrationPolicy, ANNOTATIONS } from '../../api/index.ts';
import { reconcilePolicy } from './reconcile.ts';

const isFastest = (p: V1Pod) => migrationPolicy(p) === 'Auto' && p.metadata?.annotations?.[ANNOTATIONS.placement] === 'fastest';

/** Builds the policy controller and subscribes it. */
export function newPolicyController(ctx: ControllerContext, informers: Informers): Controller {
  const c = new Controller('policy', (k) => reconcilePolicy(k, ctx), { clock: ctx.clock, log: ctx.log, workers: 1 });
  const mops = new Map<string, string | undefined>();
  informers.on('nodes', (verb, node) => {
    const name = node.metadata?.name ?? '';
    if (node.status?.conditions?.some((x) => x.type === 'MemoryPressure' && x.status === 'True')) c.enqueue(`node:${name}`);
    // A node joining, leaving, or changing readiness or speed can make a faster home.
    const sig = `${verb === 'delete' ? 'gone' : ''}${node.metadata?.annotations?.[ANNOTATIONS.interpMops]}|${node.status?.conditions?.find((x) => x.type === 'Ready')?.status}|${node.spec?.unschedulable}`;
    if (mops.get(name) !== sig) {
      mops.set(name, sig);
      for (const p of ctx.cache.pods.list()) if (isFastest(p)) c.enqueue(`pod:${keyOf(p)}`);
    }
  });
  informers.on('pods', (verb, pod: V1Pod) => {
    if (verb === 'delete' || migrationPolicy(pod) !== 'Auto') return;
    if (isFastest(pod)) c.enqueue(`pod:${keyOf(pod)}`);
    if (pod.spec?.nodeName) c.enqueue(`node:${pod.spec.nodeName}`);
  });
  return c;
}
