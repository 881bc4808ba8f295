// The public face of shared/cohorts/: the only file other folders import.
export { cohortFilterResolver, personCohorts } from './membership.ts';
