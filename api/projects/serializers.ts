import type { ProjectRow } from '../http/auth.ts';
import { isoTimestamp } from '../../shared/platform/time.ts';
import {
  dateTime,
  nullableInteger,
  nullableOpenObject,
  nullableString,
  openObject,
  record,
  stringArray,
} from '../http/schemas.ts';

/** ProjectBackwardCompatBasicSerializer: the list item of /api/projects/. */
export function projectBasic(project: ProjectRow) {
  return {
    id: project.id,
    uuid: project.uuid,
    organization: project.organization_id,
    api_token: project.api_token,
    name: project.name,
    completed_snippet_onboarding: project.completed_snippet_onboarding,
    has_completed_onboarding_for: null,
    ingested_event: project.ingested_event,
    is_demo: project.is_demo,
    timezone: project.timezone,
    access_control: false,
  };
}

/** The detail view: the basic fields plus the ones clients read from the full serializer. */
export function projectDetail(project: ProjectRow) {
  return {
    ...projectBasic(project),
    project_id: project.id,
    created_at: isoTimestamp(project.created_at),
    updated_at: isoTimestamp(project.updated_at),
    anonymize_ips: false,
    app_urls: [],
    slack_incoming_webhook: null,
    data_attributes: ['data-attr'],
    person_display_name_properties: null,
    test_account_filters: [],
    test_account_filters_default_checked: false,
    path_cleaning_filters: [],
    week_start_day: null,
    primary_dashboard: null,
    effective_membership_level: null,
    // Ours (PostHog has no per-project setting): days of data the nightly retention job keeps, null = forever.
    event_retention_days: project.event_retention_days,
    recording_retention_days: project.recording_retention_days,
  };
}

export const projectBasicSchema = record({
  id: { type: 'integer' },
  uuid: { type: 'string', format: 'uuid' },
  organization: { type: 'string', format: 'uuid' },
  api_token: { type: 'string' },
  name: { type: 'string' },
  completed_snippet_onboarding: { type: 'boolean' },
  has_completed_onboarding_for: nullableOpenObject(),
  ingested_event: { type: 'boolean' },
  is_demo: { type: 'boolean' },
  timezone: { type: 'string' },
  access_control: { type: 'boolean' },
});

export const projectDetailSchema = record({
  ...projectBasicSchema.properties,
  project_id: { type: 'integer' },
  created_at: dateTime,
  updated_at: dateTime,
  anonymize_ips: { type: 'boolean' },
  app_urls: stringArray,
  slack_incoming_webhook: nullableString,
  data_attributes: stringArray,
  person_display_name_properties: { type: ['array', 'null'], items: { type: 'string' } },
  test_account_filters: { type: 'array', items: openObject() },
  test_account_filters_default_checked: { type: 'boolean' },
  path_cleaning_filters: { type: 'array', items: openObject() },
  week_start_day: { type: ['integer', 'null'] },
  primary_dashboard: { type: ['integer', 'null'] },
  effective_membership_level: { type: ['integer', 'null'] },
  event_retention_days: { ...nullableInteger, description: 'Days of events kept (null: forever)' },
  recording_retention_days: { ...nullableInteger, description: 'Days of session recordings kept (null: forever)' },
});
