/**
 * Subresources: `status`, `scale`, pods' `eviction`, `binding`, `replace` and `log`, `proxy` of
 * nodes, services and pods, and the `data` of checkpoints and modules. Each is served only for
 * resources whose definition lists it.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { podRuntime } from '../../api/index.ts';
import { ApiError, badRequest, resourceNotFound } from '../errors.ts';
import { bindPod } from '../registry/pods/binding.ts';
import { evictPod } from '../registry/pods/eviction.ts';
import { replacePod } from '../registry/pods/replace.ts';
import { jsonPatch, mergePatch } from '../registry/patch.ts';
import { scalarError } from '../registry/field-types.ts';
import type { Subresource } from '../registry/types.ts';
import { at, rec, selectorString } from '../registry/util.ts';
import type { KubeObject } from '../storage/index.ts';
import type { RequestScope } from './context.ts';
import { patchTypeOf, sendJson, warningHeader } from './http.ts';
import { podLogOptions } from './log-options.ts';
import { readObject, writeOptions } from './resources.ts';
import { serveCheckpointData } from './data.ts';
import { feosNodeOf, serveFeosPodSubresource } from './feos-pods.ts';
import { serveModuleData } from './module-data.ts';
import { serveNodeProxy, servePodLog, servePodProxy, serveServiceProxy } from './proxy.ts';

function toScale(obj: KubeObject, paths: { specReplicas: string[]; statusReplicas: string[]; selector: string[] }): Record<string, unknown> {
  return {
    kind: 'Scale',
    apiVersion: 'autoscaling/v1',
    metadata: { name: obj.metadata.name, namespace: obj.metadata.namespace, uid: obj.metadata.uid, resourceVersion: obj.metadata.resourceVersion, creationTimestamp: obj.metadata.creationTimestamp },
    spec: { replicas: at(obj, paths.specReplicas) ?? 0 },
    status: { replicas: at(obj, paths.statusReplicas) ?? 0, selector: selectorString(at(obj, paths.selector)) },
  };
}

/** Pods' streaming subresources of Kubernetes that a WebAssembly pod has no counterpart for. */
const STREAMING_SUBRESOURCES = new Set(['exec', 'attach', 'portforward']);

/**
 * The answer to `pods/<name>/exec`, `attach` and `portforward` (`kubectl exec`, `attach`,
 * `port-forward`): a WebAssembly pod has no processes to start or attach to and no network
 * namespace to forward into, so these are refused with a 400 BadRequest `metav1.Status` that
 * kubectl prints whole (`Error from server (BadRequest): ...`) and that says what to use instead.
 * (A 404 reads as a missing API; kubectl prints a 405's message the same way but its reason,
 * MethodNotAllowed, suggests another verb would work.)
 */
function streamingNotSupported(pod: KubeObject, sub: string): ApiError {
  const name = pod.metadata.name;
  const ns = pod.metadata.namespace ?? 'default';
  const what = sub === 'portforward' ? 'port-forward' : sub;
  const nsFlag = ns === 'default' ? '' : ` -n ${ns}`;
  const instead =
    sub === 'portforward'
      ? `reach the pod's HTTP through the API server's service proxy (kubectl get --raw /api/v1/namespaces/${ns}/services/<service>/proxy/<path>) or at the pod's IP and port (kubectl get pod ${name}${nsFlag} -o wide)`
      : `use kubectl logs ${name}${nsFlag} for its output, and its HTTP through a service's proxy or at the pod's IP and port`;
  return new ApiError('BadRequest', `${what} is not supported for WebAssembly pods (pod "${name}" runs a module, not processes): ${instead}`, {
    name,
    kind: 'pods',
  });
}

/** Serves `<resource>/<name>/<subresource>[/...]`. */
export async function serveSubresource(scope: RequestScope): Promise<void> {
  const { req, res, url, ctx, info } = scope;
  const def = info.def!;
  const reg = ctx.registry;
  const sub = info.subresource as Subresource;
  const method = req.method ?? 'GET';
  const namespace = def.namespaced ? (info.namespace ?? '') : '';
  const name = info.name!;
  if (def.kind === 'Pod' && def.group === '' && (STREAMING_SUBRESOURCES.has(info.subresource!) || info.subresource === 'log')) {
    // The log's options are checked before the pod is looked up, as kube-apiserver's LogREST does.
    if (info.subresource === 'log') podLogOptions(url.searchParams, name);
    // A Pod bound to a FeOS node: its log, exec and port-forward go through the node connection (./feos-pods.ts).
    const pod = await reg.get(def, namespace, name);
    const feosNode = await feosNodeOf(reg, pod);
    if (feosNode && info.subpath === '') return serveFeosPodSubresource(scope, pod, feosNode, ctx.feosPodStreams?.());
    if (STREAMING_SUBRESOURCES.has(info.subresource!)) {
      // A microVM pod not bound yet (Pending, or between a drain and its new node) is not a Wasm pod: as Kubernetes answers.
      if (!rec(pod.spec).nodeName && podRuntime(pod as unknown as V1Pod)?.runtime === 'microvm') throw badRequest(`pod ${name} does not have a host assigned`);
      throw streamingNotSupported(pod, info.subresource!);
    }
  }
  if (!def.subresources.includes(sub)) throw resourceNotFound();
  if (sub !== 'proxy' && info.subpath !== '') throw resourceNotFound();
  const warnings: string[] = [];
  const notAllowed = () => new ApiError('MethodNotAllowed', `${method} is not supported on ${def.plural}/${sub}`);
  switch (sub) {
    case 'status': {
      if (method === 'GET') return sendJson(res, 200, await reg.get(def, namespace, name));
      if (method === 'PUT') return sendJson(res, 200, await reg.update(def, namespace, name, await readObject(scope), writeOptions(url, warnings), 'status'), warningHeader(warnings));
      if (method === 'PATCH') {
        const type = patchTypeOf(req);
        const opts = writeOptions(url, warnings);
        if (type === 'apply' && !opts.fieldManager) throw badRequest('PATCH of type apply requires a fieldManager');
        return sendJson(res, 200, (await reg.patch(def, namespace, name, type, await readObject(scope), opts, 'status')).object, warningHeader(warnings));
      }
      throw notAllowed();
    }
    case 'scale': {
      const paths = def.scale!;
      const current = await reg.get(def, namespace, name);
      if (method === 'GET') return sendJson(res, 200, toScale(current, paths));
      let scale: Record<string, unknown>;
      if (method === 'PUT') scale = rec(await readObject(scope));
      else if (method === 'PATCH') {
        const type = patchTypeOf(req);
        const body = await readObject(scope);
        scale = rec(type === 'json' ? jsonPatch(toScale(current, paths), body) : mergePatch(toScale(current, paths), body));
      } else throw notAllowed();
      const replicas = rec(scale.spec).replicas;
      // Decoded as kube-apiserver decodes a Scale: a string or a number beyond int32 is a 400, not a range error.
      const typeError = scalarError(replicas, 'int32', 'ScaleSpec', 'spec.replicas');
      if (typeError) throw new ApiError('BadRequest', `Scale in version "v1" cannot be handled as a Scale: ${typeError}`);
      if (typeof replicas !== 'number' || !Number.isInteger(replicas) || replicas < 0) {
        throw new ApiError('Invalid', `Scale.autoscaling "${name}" is invalid: spec.replicas: Invalid value: ${JSON.stringify(replicas)}: must be greater than or equal to 0`, {
          name,
          group: 'autoscaling',
          kind: 'Scale',
          causes: [{ reason: 'FieldValueInvalid', message: 'Invalid value: must be greater than or equal to 0', field: 'spec.replicas' }],
        });
      }
      const rv = rec(scale.metadata).resourceVersion;
      const next = structuredClone(current);
      rec(next.spec).replicas = replicas;
      if (typeof rv === 'string' && rv) next.metadata.resourceVersion = rv;
      const updated = await reg.update(def, namespace, name, next, writeOptions(url, warnings));
      return sendJson(res, 200, toScale(updated, paths));
    }
    case 'eviction': {
      if (method !== 'POST') throw notAllowed();
      const body = await readObject(scope);
      // kubectl drain --dry-run=server sends the dry run inside the Eviction (deleteOptions.dryRun), not on the URL.
      const inBody = rec(rec(body).deleteOptions).dryRun;
      const dryRun = url.searchParams.getAll('dryRun').includes('All') || (Array.isArray(inBody) && inBody.includes('All'));
      const status = await evictPod(reg, namespace, name, body, { dryRun });
      return sendJson(res, 201, status);
    }
    case 'binding': {
      if (method !== 'POST') throw notAllowed();
      return sendJson(res, 201, await bindPod(reg, namespace, name, await readObject(scope), { dryRun: url.searchParams.getAll('dryRun').includes('All') }));
    }
    case 'replace': {
      if (method !== 'POST') throw notAllowed();
      const fresh = await replacePod(reg, namespace, name, await readObject(scope), { dryRun: url.searchParams.getAll('dryRun').includes('All') });
      ctx.log.info({ namespace, pod: name, node: rec(fresh.spec).nodeName, uid: fresh.metadata.uid }, 'pod replaced');
      return sendJson(res, 201, fresh);
    }
    case 'data':
      if (def.kind === 'Checkpoint') return serveCheckpointData(scope);
      return serveModuleData(scope);
    case 'log':
      if (method !== 'GET') throw notAllowed();
      return servePodLog(scope);
    case 'proxy':
      if (def.kind === 'Node') return serveNodeProxy(scope);
      if (def.kind === 'Service') return serveServiceProxy(scope);
      if (def.kind === 'Pod') return servePodProxy(scope);
      throw resourceNotFound();
  }
}
