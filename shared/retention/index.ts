// The public face of shared/retention/: the only file other folders import.
export { enforceRetention } from './job.ts';
export { RETENTION_DAYS, type RetentionCounts } from './rules.ts';
export { previewRetention, runRetention } from './run.ts';
export { updateProjectSettings } from './settings.ts';
export { retentionRunPage, type RetentionRunRow } from './store.ts';
