/** Volumes: the store, its records and claims (feos.volume.v1). */
export { VolumeStore, parseVolumeId, MIN_VOLUME_BYTES, MAX_VOLUME_BYTES, VOLUME_RECORD_VERSION } from './store.ts';
export { checkVolumeLabels, MAX_VOLUME_LABELS } from './labels.ts';
