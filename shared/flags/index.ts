// The public face of shared/flags/: the only file other folders import.
export type { FlagFilters } from './evaluate.ts';
export { evaluateFlagsForPerson, prepareFlags, type PreparedFlag, type ProjectFlags } from './service.ts';
export { activeFlags, copyHashKeyOverrides, hashKeyOverridesOf } from './store.ts';
