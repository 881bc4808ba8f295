// The public face of shared/persons/: the only file other folders import.
export {
  mergePartner,
  processesPerson,
  processPersons,
  type IngestEvent,
  type PersonWarning,
} from './ingest.ts';
export { personUpdateOf } from './person-updates.ts';
export { personUuidFor } from './person-uuid.ts';
export {
  PROPERTY_INDEX_KINDS,
  dropPersonPropertyIndexes,
  indexPersonProperty,
  personIndexBuilds,
  personPropertyIndexes,
} from './property-indexes.ts';
export { applyPropertyUpdate, unsetKeys, type Properties, type PropertyUpdate } from './property-rules.ts';
export { changePersonProperties, orderedDistinctIds, splitPerson } from './service.ts';
export {
  EXACT_COUNT_LIMIT,
  csvExtent,
  deletePersonRows,
  findPerson,
  listPersons,
  personListFilter,
  personsAfter,
  personsByIds,
  personsByIdsOrDistinctIds,
  propertyPaths,
  type ListKey,
  type PersonWithIds,
} from './store.ts';
export { propertiesTimeline, type TimelinePoint } from './timeline.ts';
