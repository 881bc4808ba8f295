// The public face of shared/events/: the only file other folders import.
export { trimShippedEvents } from './buffer.ts';
export { clickHouseFilterSql, jsonText } from './clickhouse-filters.ts';
export { createClickHouseEventStore } from './clickhouse.ts';
export { createEventStore } from './create.ts';
export {
  LIFECYCLE_TYPES,
  experimentNames,
  noEventColumns,
  type DayChange,
  type DeletedKeyCount,
  type EngineMetric,
  type EventColumns,
  type EventDeletionGroup,
  type EventExportBatch,
  type EventExportGroup,
  type EventStore,
  type EventStoreDeps,
  type EventScrubAction,
  type EventScrubMatch,
  type ExperimentDayRequest,
  type ExperimentEventFilter,
  type ExperimentEvents,
  type ExperimentProperty,
  type FunnelParams,
  type LifecycleType,
  type Page,
  type PerformedEventQuery,
  type PersonIdPage,
  type RecentEventSample,
  type ScrubHooks,
  type ScrubStoreCounts,
} from './event-store.ts';
export { ensureEventPartitionsJob } from './partitions-job.ts';
export {
  countProjectEventsIn,
  deleteProjectEventsBefore,
  dropPartitionIfOnly,
  eventsPerProjectIn,
  projectsInPartition,
} from './partitions.ts';
export { createPostgresEventStore } from './postgres.ts';
export {
  deleteRecordingSessions,
  personRecordings,
  storeRecordingSnapshots,
  type RecordingSnapshot,
} from './recordings.ts';
export { shipEventsJob } from './ship-job.ts';
export { backfillEvents, shippingLag } from './shipper.ts';
export { EVENTS_PER_INSERT, eventPartitions, storeEvents, type MonthPartition } from './store.ts';
