// Request schemas of the project routes; the request types are derived from them.
import type { FromSchema } from 'json-schema-to-ts';
import { RETENTION_DAYS } from '../../shared/retention/index.ts';

const retentionDays = (what: string) =>
  ({
    type: ['integer', 'null'],
    ...RETENTION_DAYS,
    description: `Days of ${what} to keep; older ones are removed in the nightly off-peak window. null: keep forever.`,
  }) as const;

/** PATCH: the settings this service keeps; PostHog's other project fields are ignored, as PostHog ignores read-only ones. */
export const updateBody = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 200 },
    event_retention_days: retentionDays('events'),
    recording_retention_days: retentionDays('session recordings'),
  },
} as const;
export type UpdateBody = FromSchema<typeof updateBody>;
