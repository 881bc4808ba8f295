import { isoTimestamp } from '../../shared/time.ts';
import type { ProjectRow } from '../http/auth.ts';
import { projectBasic } from '../projects/serializers.ts';
import type { OrganizationRow } from './visibility.ts';

const slugOf = (name: string) => name.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '');

/** OrganizationBasicSerializer: the items of `organizations` in /api/users/@me. */
export function organizationBasic(organization: OrganizationRow) {
  return {
    id: organization.id,
    name: organization.name,
    slug: slugOf(organization.name),
    logo_media_id: null,
    membership_level: organization.level,
    members_can_use_personal_api_keys: true,
  };
}

/** OrganizationSerializer: /api/organizations/ items and detail, and `organization` in /api/users/@me. */
export function organizationDetail(organization: OrganizationRow, projects: ProjectRow[]) {
  return {
    ...organizationBasic(organization),
    created_at: isoTimestamp(organization.created_at),
    updated_at: isoTimestamp(organization.updated_at),
    plugins_access_level: 0,
    teams: projects.map(projectBasic),
    projects: projects.map((p) => ({ id: p.id, name: p.name, organization: p.organization_id })),
    available_product_features: [],
    is_member_join_email_enabled: true,
    metadata: {},
    customer_id: null,
    enforce_2fa: null,
    members_can_invite: true,
    allow_publicly_shared_resources: true,
    member_count: organization.member_count,
  };
}
