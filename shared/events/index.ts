// The public face of shared/events/: the only file other folders import.
export { LIFECYCLE_TYPES, type FunnelParams, type LifecycleType, type Page, type PersonIdPage } from './event-store.ts';
export { trimShippedEvents, type TrimResult } from './buffer.ts';
export { clickHouseFilterSql, jsonText } from './clickhouse-filters.ts';
export { createClickHouseEventStore, type ClickHouseEventStore } from './clickhouse.ts';
export { createEventStore } from './create.ts';
export {
  experimentNames,
  noEventColumns,
  type DeletedKeyCount,
  type EventColumns,
  type EventDeletionGroup,
  type EventStore,
  type ExperimentEventFilter,
  type ExperimentEvents,
  type ExperimentProperty,
  type PerformedEventQuery,
} from './event-store.ts';
export {
  countProjectEventsIn,
  deleteProjectEventsBefore,
  dropPartitionIfOnly,
  eventsPerProjectIn,
  projectsInPartition,
} from './partitions.ts';
export { createPostgresEventStore } from './postgres.ts';
export { backfillEvents, shipEvents, shippingLag, type ShipResult } from './shipper.ts';
export {
  EVENTS_PER_INSERT,
  ensureEventPartitions,
  eventPartitions,
  storeEvents,
  type MonthPartition,
} from './store.ts';
