/** Label selectors (`metav1.LabelSelector`) as Kubernetes matches them. */
import type { V1LabelSelector } from '@kubernetes/client-node';

/**
 * Whether `labels` match `selector`. An empty selector matches everything; a missing one matches nothing
 * (as for ReplicaSets, whose selector is required).
 */
export function matchLabelSelector(selector: V1LabelSelector | undefined, labels: Record<string, string> = {}): boolean {
  if (!selector) return false;
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of selector.matchExpressions ?? []) {
    const v = labels[e.key];
    switch (e.operator) {
      case 'In':
        if (v === undefined || !(e.values ?? []).includes(v)) return false;
        break;
      case 'NotIn':
        if (v !== undefined && (e.values ?? []).includes(v)) return false;
        break;
      case 'Exists':
        if (v === undefined) return false;
        break;
      case 'DoesNotExist':
        if (v !== undefined) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}
