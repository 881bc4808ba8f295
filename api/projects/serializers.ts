import type { ProjectRow } from '../http/auth.ts';
import { isoTimestamp } from '../../shared/time.ts';

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
  };
}
