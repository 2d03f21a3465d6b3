/**
 * `events.k8s.io/v1` Events, stored as core `v1` Events and converted field by field, as
 * Kubernetes does: `regarding` is `involvedObject`, `note` is `message`, `reportingController` is
 * `reportingComponent`, `deprecatedSource`/`deprecatedFirstTimestamp`/`deprecatedLastTimestamp`/
 * `deprecatedCount` are `source`/`firstTimestamp`/`lastTimestamp`/`count`. No short name, so that
 * `kubectl get ev` stays unambiguous.
 */
import type { KubeObject } from '../../storage/index.ts';
import { events } from '../core/index.ts';
import type { ResourceDef } from '../types.ts';

/** [events.k8s.io/v1 field, core v1 field] */
const FIELDS: [string, string][] = [
  ['eventTime', 'eventTime'],
  ['series', 'series'],
  ['reportingController', 'reportingComponent'],
  ['reportingInstance', 'reportingInstance'],
  ['action', 'action'],
  ['reason', 'reason'],
  ['regarding', 'involvedObject'],
  ['related', 'related'],
  ['note', 'message'],
  ['type', 'type'],
  ['deprecatedSource', 'source'],
  ['deprecatedFirstTimestamp', 'firstTimestamp'],
  ['deprecatedLastTimestamp', 'lastTimestamp'],
  ['deprecatedCount', 'count'],
];

function convert(obj: KubeObject, from: 0 | 1): KubeObject {
  const out: KubeObject = { metadata: obj.metadata };
  for (const pair of FIELDS) {
    const v = obj[pair[from]];
    if (v !== undefined) out[pair[1 - from]!] = v;
  }
  return out;
}

/** events.k8s.io/v1 events */
export const eventsV1: ResourceDef = {
  ...events,
  group: 'events.k8s.io',
  version: 'v1',
  shortNames: undefined,
  fields: FIELDS.map((f) => f[0]),
  fieldSelectors: events.fieldSelectors,
  storedAs: {
    def: events,
    toStored: (o) => convert(o, 0),
    fromStored: (o) => convert(o, 1),
  },
};
