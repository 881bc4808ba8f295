// Request and response schemas of the event definition routes; the request types are derived from them.
import type { FromSchema } from 'json-schema-to-ts';
import { PAGE_QUERY_PROPERTIES } from '../http/pagination.ts';
import { dateTime, nullableDateTime, record, stringArray } from '../http/schemas.ts';
import { userBasicSchema } from '../users/serializers.ts';

export const listQuery = {
  type: 'object',
  properties: {
    ...PAGE_QUERY_PROPERTIES,
    search: { type: 'string', maxLength: 1000, description: 'Every space-separated term must appear in the name' },
    event_type: { enum: ['event', 'all', 'action_event', 'event_custom', 'event_posthog'] },
    excluded_properties: {
      type: 'string',
      maxLength: 100_000,
      description: 'JSON array of event names to leave out',
    },
    exclude_hidden: { type: 'boolean' },
    ordering: {
      type: 'array',
      items: { type: 'string', maxLength: 40 },
      maxItems: 5,
      description: 'name, last_seen_at, last_seen_at::date; prefix - for descending',
    },
  },
} as const;
export type ListQuery = FromSchema<typeof listQuery>;

export const updateBody = {
  type: 'object',
  properties: {
    description: { type: 'string', maxLength: 10_000 },
    tags: { type: 'array', items: { type: 'string', maxLength: 255 }, maxItems: 100 },
    owner: { type: ['integer', 'null'] },
    verified: { type: 'boolean' },
    hidden: { type: 'boolean' },
    default_columns: { type: 'array', items: { type: 'string', maxLength: 400 }, maxItems: 100 },
    post_to_slack: { type: 'boolean' },
  },
} as const;
export type UpdateBody = FromSchema<typeof updateBody>;

export const definitionSchema = record({
  id: { type: 'string', format: 'uuid' },
  name: { type: 'string' },
  owner: userBasicSchema,
  description: { type: 'string' },
  tags: stringArray,
  created_at: dateTime,
  updated_at: nullableDateTime,
  updated_by: userBasicSchema,
  last_seen_at: nullableDateTime,
  verified: { type: 'boolean' },
  verified_at: nullableDateTime,
  verified_by: userBasicSchema,
  hidden: { type: 'boolean' },
  is_action: { const: false },
  post_to_slack: { type: 'boolean' },
  default_columns: stringArray,
  volume_30_day: { type: 'null', description: 'Not computed' },
  query_usage_30_day: { type: 'null', description: 'See the metrics endpoint' },
  plan_violations: {
    description:
      "Ours (PostHog clients ignore it): the tracking plan's violations of this event, per plan version and kind",
    ...record({
      total: { type: 'number' },
      counts: {
        type: 'array',
        items: record({
          plan_version: { type: 'integer' },
          kind: { type: 'string' },
          count: { type: 'number' },
          last_seen_at: { type: 'string', format: 'date-time' },
        }),
      },
    }),
  },
});
