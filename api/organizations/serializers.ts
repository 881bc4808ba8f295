import { isoTimestamp } from '../../shared/platform/time.ts';
import type { ProjectRow } from '../http/auth.ts';
import { projectBasic, projectBasicSchema } from '../projects/serializers.ts';
import { dateTime, nullableString, openObject, record } from '../http/schemas.ts';
import type { OrganizationRow } from './visibility.ts';

const slugOf = (name: string) =>
  name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-|-$/g, '');

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

export const organizationBasicSchema = record({
  id: { type: 'string', format: 'uuid' },
  name: { type: 'string' },
  slug: { type: 'string' },
  logo_media_id: nullableString,
  membership_level: { type: 'integer', enum: [1, 8, 15], description: '1 member, 8 admin, 15 owner' },
  members_can_use_personal_api_keys: { type: 'boolean' },
});

export const organizationDetailSchema = record({
  ...organizationBasicSchema.properties,
  created_at: dateTime,
  updated_at: dateTime,
  plugins_access_level: { type: 'integer' },
  teams: { type: 'array', items: projectBasicSchema },
  projects: {
    type: 'array',
    items: record({
      id: { type: 'integer' },
      name: { type: 'string' },
      organization: { type: 'string', format: 'uuid' },
    }),
  },
  available_product_features: { type: 'array', items: openObject() },
  is_member_join_email_enabled: { type: 'boolean' },
  metadata: openObject(),
  customer_id: nullableString,
  enforce_2fa: { type: ['boolean', 'null'] },
  members_can_invite: { type: 'boolean' },
  allow_publicly_shared_resources: { type: 'boolean' },
  member_count: { type: 'integer' },
});
