// Every entity, for the ORM configuration of both processes (shared/db/orm.ts): one entity per table of
// the migrations, except the partitioned `event` table, which stays behind the event store
// (shared/events/). test/shared/platform/entity-drift.test.ts checks them against the migrated schema.
import { AccessExport } from './access-export.ts';
import { ActivityLog } from './activity-log.ts';
import { AsyncDeletion } from './async-deletion.ts';
import { DeletionReceipt, DeletionReceiptKey } from './deletion-receipt.ts';
import { Cohort, CohortPerson } from './cohort.ts';
import { DeletionIdempotencyKey } from './deletion-idempotency-key.ts';
import { DeletionSuppression } from './deletion-suppression.ts';
import { EventDefinition, EventDefinitionUsage } from './event-definition.ts';
import { EventScrub } from './event-scrub.ts';
import { EventShipment, EventTrim, PersonDistinctIdChange } from './event-shipment.ts';
import {
  Experiment,
  ExperimentHoldout,
  ExperimentMetricResult,
  ExperimentSavedMetric,
  ExperimentToSavedMetric,
} from './experiment.ts';
import { ExperimentBandit, ExperimentMetricState, ExperimentPersonState } from './experiment-state.ts';
import { FeatureFlag, FeatureFlagHashKeyOverride, FeatureFlagStickyVariant } from './feature-flag.ts';
import { IngestionWarning } from './ingestion-warning.ts';
import { PlanViolationCount, QuarantinedEvent, TrackingPlanReplay, TrackingPlanVersion } from './tracking-plan.ts';
import { JobSchedule } from './job-schedule.ts';
import { Organization, OrganizationMembership } from './organization.ts';
import { Person, PersonDistinctId } from './person.ts';
import { PersonalApiKey } from './personal-api-key.ts';
import { PersonAccessLog } from './person-access-log.ts';
import { Project } from './project.ts';
import { RetentionRun } from './retention-run.ts';
import { SessionRecording, SessionRecordingSnapshot } from './session-recording.ts';
import { User } from './user.ts';
import { Webhook, WebhookDelivery } from './webhook.ts';

export {
  AccessExport,
  ActivityLog,
  AsyncDeletion,
  Cohort,
  CohortPerson,
  DeletionIdempotencyKey,
  DeletionSuppression,
  DeletionReceipt,
  DeletionReceiptKey,
  EventDefinition,
  EventDefinitionUsage,
  EventScrub,
  EventShipment,
  Experiment,
  ExperimentBandit,
  ExperimentHoldout,
  ExperimentMetricResult,
  ExperimentMetricState,
  ExperimentPersonState,
  ExperimentSavedMetric,
  ExperimentToSavedMetric,
  FeatureFlag,
  FeatureFlagHashKeyOverride,
  FeatureFlagStickyVariant,
  IngestionWarning,
  JobSchedule,
  PlanViolationCount,
  QuarantinedEvent,
  TrackingPlanReplay,
  TrackingPlanVersion,
  Organization,
  OrganizationMembership,
  Person,
  PersonalApiKey,
  PersonAccessLog,
  PersonDistinctId,
  PersonDistinctIdChange,
  Project,
  RetentionRun,
  SessionRecording,
  SessionRecordingSnapshot,
  User,
  Webhook,
  WebhookDelivery,
};
export type { AsyncDeletionRow } from './async-deletion.ts';

export const entities = [
  // accounts
  Organization,
  OrganizationMembership,
  Project,
  User,
  PersonalApiKey,
  // persons and what hangs on them
  Person,
  PersonDistinctId,
  PersonAccessLog,
  AccessExport,
  Cohort,
  CohortPerson,
  SessionRecording,
  SessionRecordingSnapshot,
  // flags and experiments
  FeatureFlag,
  FeatureFlagHashKeyOverride,
  FeatureFlagStickyVariant,
  ExperimentHoldout,
  ExperimentSavedMetric,
  Experiment,
  ExperimentToSavedMetric,
  ExperimentMetricResult,
  ExperimentMetricState,
  ExperimentPersonState,
  ExperimentBandit,
  // event definitions
  EventDefinition,
  EventDefinitionUsage,
  // ingestion, and shipping events to ClickHouse
  IngestionWarning,
  EventShipment,
  EventTrim,
  PersonDistinctIdChange,
  // tracking plans, their quarantine and violation counts
  TrackingPlanVersion,
  QuarantinedEvent,
  PlanViolationCount,
  TrackingPlanReplay,
  // webhooks and their delivery log
  Webhook,
  WebhookDelivery,
  // worker state and audit
  AsyncDeletion,
  EventScrub,
  DeletionIdempotencyKey,
  DeletionSuppression,
  DeletionReceipt,
  DeletionReceiptKey,
  JobSchedule,
  ActivityLog,
  RetentionRun,
];
