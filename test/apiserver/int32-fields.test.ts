/**
 * Integer fields as kube-apiserver decodes and validates them (issue 19). Found by a user: an HPA with
 * `maxReplicas: 99999999999` was accepted and then broke `kubectl describe`; `replicas: "3"` was refused as
 * if it were out of range. Now, as Kubernetes' JSON decoder has it, a value that does not decode as its Go
 * type (a string for an int32, a number beyond int32) is 400 BadRequest (`json: cannot unmarshal number
 * 99999999999 into Go struct field HorizontalPodAutoscalerSpec.spec.maxReplicas of type int32`), on create,
 * patch and the Scale subresource; one that decodes but is out of the field's range is 422 Invalid with
 * the validation's words (`must be greater than or equal to 0`, `must be between 1 and 65535, inclusive`).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startApiServer } from '../helpers/apiserver.ts';

const ref = { apiVersion: 'apps/v1', kind: 'Deployment', name: 'x' };
const hpa = (name: string, spec: Record<string, unknown>) => ({ apiVersion: 'autoscaling/v2', kind: 'HorizontalPodAutoscaler', metadata: { name }, spec: { scaleTargetRef: ref, maxReplicas: 3, ...spec } });
const container = (extra: Record<string, unknown> = {}) => ({ name: 'c', image: 'registry.example/app:1', ...extra });
const deployment = (name: string, spec: Record<string, unknown> = {}, c: Record<string, unknown> = {}) => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name },
  spec: { selector: { matchLabels: { a: 'b' } }, template: { metadata: { labels: { a: 'b' } }, spec: { containers: [container(c)] } }, ...spec },
});
const BAD = /^Error from server \(BadRequest\)/m;

test('int32 fields: 400 for a value that does not decode as int32, 422 for one out of the field\'s range', { timeout: 120_000 }, async (t) => {
  const api = await startApiServer(t);
  const create = async (obj: unknown) => {
    const r = await api.kubectl(['create', '-f', '-'], { input: JSON.stringify(obj) });
    assert.notEqual(r.code, 0, `${JSON.stringify(obj)} was created`);
    return r.stderr;
  };

  await t.test('HPAs', async () => {
    let e = await create(hpa('big', { maxReplicas: 99_999_999_999 }));
    assert.match(e, BAD);
    assert.match(e, /HorizontalPodAutoscaler in version "v2" cannot be handled as a HorizontalPodAutoscaler: json: cannot unmarshal number 99999999999 into Go struct field HorizontalPodAutoscalerSpec\.spec\.maxReplicas of type int32/);
    e = await create(hpa('quoted', { minReplicas: '2' }));
    assert.match(e, /cannot unmarshal string into Go struct field HorizontalPodAutoscalerSpec\.spec\.minReplicas of type int32/, 'a string is a type error, not a range error');
    e = await create(hpa('util', { metrics: [{ type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: 3_000_000_000 } } }] }));
    assert.match(e, /cannot unmarshal number 3000000000 into Go struct field MetricTarget\.spec\.metrics\.resource\.target\.averageUtilization of type int32/);
    e = await create({ apiVersion: 'autoscaling/v1', kind: 'HorizontalPodAutoscaler', metadata: { name: 'v1' }, spec: { scaleTargetRef: ref, maxReplicas: 3, targetCPUUtilizationPercentage: '50' } });
    assert.match(e, /HorizontalPodAutoscaler in version "v1" cannot be handled as a HorizontalPodAutoscaler: json: cannot unmarshal string into Go struct field HorizontalPodAutoscalerSpec\.spec\.targetCPUUtilizationPercentage of type int32/);
    // Decoded, out of range: validateHorizontalPodAutoscalerSpec's and validateScalingRules' words.
    e = await create(hpa('zero', { maxReplicas: 0 }));
    assert.match(e, /The HorizontalPodAutoscaler "zero" is invalid: spec\.maxReplicas: Invalid value: 0: must be greater than 0/);
    e = await create(hpa('window', { behavior: { scaleUp: { stabilizationWindowSeconds: 4000 } } }));
    assert.match(e, /spec\.behavior\.scaleUp\.stabilizationWindowSeconds: Invalid value: 4000: must be less than or equal to 3600/);
    e = await create(hpa('negative', { behavior: { scaleDown: { stabilizationWindowSeconds: -1 } } }));
    assert.match(e, /spec\.behavior\.scaleDown\.stabilizationWindowSeconds: Invalid value: -1: must be greater than or equal to zero/);
    e = await create(hpa('policy', { behavior: { scaleUp: { policies: [{ type: 'Pods', value: 0, periodSeconds: 2000 }] } } }));
    assert.match(e, /spec\.behavior\.scaleUp\.policies\[0\]\.value: Invalid value: 0: must be greater than zero/);
    assert.match(e, /spec\.behavior\.scaleUp\.policies\[0\]\.periodSeconds: Invalid value: 2000: must be less than or equal to 1800/);
    // The largest int32 decodes, and is a valid maxReplicas: kubectl describe shows it.
    const r = await api.kubectl(['create', '-f', '-'], { input: JSON.stringify(hpa('max', { maxReplicas: 2_147_483_647 })) });
    assert.equal(r.code, 0, r.stderr);
    const d = await api.kubectl(['describe', 'hpa', 'max']);
    assert.equal(d.code, 0, d.stderr);
    assert.match(d.stdout, /^Max replicas:\s+2147483647$/m);
  });

  await t.test('workloads, their pod templates, pods and Services', async () => {
    let e = await create(deployment('big', { replicas: 99_999_999_999 }));
    assert.match(e, /Deployment in version "v1" cannot be handled as a Deployment: json: cannot unmarshal number 99999999999 into Go struct field DeploymentSpec\.spec\.replicas of type int32/);
    e = await create(deployment('quoted', { replicas: 'three' }));
    assert.match(e, /cannot unmarshal string into Go struct field DeploymentSpec\.spec\.replicas of type int32/);
    e = await create(deployment('negative', { replicas: -1 }));
    assert.match(e, /The Deployment "negative" is invalid: spec\.replicas: Invalid value: -1: must be greater than or equal to 0/);
    e = await create(deployment('ready', { minReadySeconds: -1 }));
    assert.match(e, /spec\.minReadySeconds: Invalid value: -1: must be greater than or equal to 0/);
    e = await create(deployment('deadline', { minReadySeconds: 10, progressDeadlineSeconds: 10 }));
    assert.match(e, /spec\.progressDeadlineSeconds: Invalid value: 10: must be greater than minReadySeconds/);
    e = await create(deployment('port', {}, { ports: [{ containerPort: 99_999_999_999 }] }));
    assert.match(e, /cannot unmarshal number 99999999999 into Go struct field ContainerPort\.spec\.template\.spec\.containers\.ports\.containerPort of type int32/);
    e = await create(deployment('port0', {}, { ports: [{ containerPort: 0 }] }));
    assert.match(e, /spec\.template\.spec\.containers\[0\]\.ports\[0\]\.containerPort: Required value/);
    e = await create(deployment('hostport', {}, { ports: [{ containerPort: 80, hostPort: 70_000 }] }));
    assert.match(e, /spec\.template\.spec\.containers\[0\]\.ports\[0\]\.hostPort: Invalid value: 70000: must be between 1 and 65535, inclusive/);
    // A template's resources as a pod's (found by a user: `kubectl set resources --limits=memory=-1Mi` was
    // stored, and each pod the ReplicaSet then tried was refused, as FailedCreate events).
    e = await create(deployment('negmem', {}, { resources: { limits: { memory: '-1Mi' } } }));
    assert.match(e, /The Deployment "negmem" is invalid: spec\.template\.spec\.containers\[0\]\.resources\.limits\[memory\]: Invalid value: "-1Mi": must be greater than or equal to 0/);
    e = await create(deployment('overlimit', {}, { resources: { requests: { memory: '2Mi' }, limits: { memory: '1Mi' } } }));
    assert.match(e, /spec\.template\.spec\.containers\[0\]\.resources\.requests: Invalid value: "2Mi": must be less than or equal to memory limit of 1Mi/);
    e = await create(deployment('notqty', {}, { resources: { limits: { memory: 'lots' } } }));
    assert.match(e, /spec\.template\.spec\.containers\[0\]\.resources\.limits\[memory\]: Invalid value: "lots": quantities must match the regular expression/);
    e = await create({ apiVersion: 'apps/v1', kind: 'StatefulSet', metadata: { name: 's' }, spec: { replicas: '1', serviceName: 's', selector: { matchLabels: { a: 'b' } }, template: { metadata: { labels: { a: 'b' } }, spec: { containers: [container()] } } } });
    assert.match(e, /StatefulSet in version "v1" cannot be handled as a StatefulSet: json: cannot unmarshal string into Go struct field StatefulSetSpec\.spec\.replicas of type int32/);
    e = await create({ apiVersion: 'batch/v1', kind: 'Job', metadata: { name: 'j' }, spec: { template: { spec: { restartPolicy: 'Never', containers: [container({ ports: [{ containerPort: '80' }] })] } } } });
    assert.match(e, /Job in version "v1" cannot be handled as a Job: json: cannot unmarshal string into Go struct field ContainerPort\.spec\.template\.spec\.containers\.ports\.containerPort of type int32/);
    e = await create({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p' }, spec: { containers: [container({ ports: [{ containerPort: '80' }] })] } });
    assert.match(e, /Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field ContainerPort\.spec\.containers\.ports\.containerPort of type int32/);
    e = await create({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p' }, spec: { containers: [container({ ports: [{ containerPort: 70_000 }] })] } });
    assert.match(e, /The Pod "p" is invalid: spec\.containers\[0\]\.ports\[0\]\.containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive/);
    e = await create({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'svc' }, spec: { ports: [{ port: 'http' }] } });
    assert.match(e, /Service in version "v1" cannot be handled as a Service: json: cannot unmarshal string into Go struct field ServicePort\.spec\.ports\.port of type int32/);
    e = await create({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'svc' }, spec: { type: 'NodePort', ports: [{ port: 80, nodePort: 70_000 }] } });
    assert.match(e, /The Service "svc" is invalid: spec\.ports\[0\]\.nodePort: Invalid value: 70000: must be between 1 and 65535, inclusive/);
  });

  await t.test('patches and the Scale subresource', async () => {
    let r = await api.kubectl(['create', '-f', '-'], { input: JSON.stringify(deployment('ok', { replicas: 1 })) });
    assert.equal(r.code, 0, r.stderr);
    r = await api.kubectl(['patch', 'deployment', 'ok', '-p', '{"spec":{"replicas":99999999999}}']);
    assert.match(r.stderr, /BadRequest.*cannot unmarshal number 99999999999 into Go struct field DeploymentSpec\.spec\.replicas of type int32/);
    r = await api.kubectl(['patch', 'deployment', 'ok', '-p', '{"spec":{"replicas":"2"}}']);
    assert.match(r.stderr, /BadRequest.*cannot unmarshal string into Go struct field DeploymentSpec\.spec\.replicas of type int32/);
    r = await api.kubectl(['scale', 'deployment', 'ok', '--replicas=99999999999']);
    assert.match(r.stderr, /BadRequest.*Scale in version "v1" cannot be handled as a Scale: json: cannot unmarshal number 99999999999 into Go struct field ScaleSpec\.spec\.replicas of type int32/);
    r = await api.kubectl(['patch', 'deployment', 'ok', '--subresource=scale', '--type=merge', '-p', '{"spec":{"replicas":"2"}}']);
    assert.match(r.stderr, /BadRequest.*Scale in version "v1" cannot be handled as a Scale: json: cannot unmarshal string into Go struct field ScaleSpec\.spec\.replicas of type int32/);
    r = await api.kubectl(['set', 'resources', 'deployment', 'ok', '--limits=memory=-1Mi']);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /spec\.template\.spec\.containers\[0\]\.resources\.limits\[memory\]: Invalid value: "-1Mi": must be greater than or equal to 0/);
    r = await api.kubectl(['scale', 'deployment', 'ok', '--replicas=-1']);
    assert.notEqual(r.code, 0);
    r = await api.kubectl(['get', 'deployment', 'ok', '-o', 'jsonpath={.spec.replicas}']);
    assert.equal(r.stdout, '1', 'nothing refused was stored');
  });
});
