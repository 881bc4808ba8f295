// PostHog's ingestion warnings list: the events capture accepted (200) but dropped or stored altered in
// the last 30 days, one summary per type with its most recent examples.
import { warningSummaries, type WarningSummary } from '../../shared/ingestion/index.ts';
import { isoTimestamp } from '../../shared/platform/time.ts';
import { defineRoute } from '../http/routes.ts';
import { dateTime, openObject, record } from '../http/schemas.ts';

const listQuery = {
  type: 'object',
  properties: {
    q: {
      type: 'string',
      maxLength: 1000,
      description: 'Only warnings whose type, details, distinct id or event uuid contain this text',
    },
    type: { type: 'string', maxLength: 100, description: 'Only warnings of this type' },
    examples: {
      type: 'integer',
      minimum: 1,
      maximum: 500,
      default: 50,
      description: 'Most recent warnings shown per type (PostHog shows 50)',
    },
  },
} as const;

const warningSchema = record({ type: { type: 'string' }, timestamp: dateTime, details: openObject() });
const summarySchema = record({
  type: { type: 'string' },
  lastSeen: dateTime,
  count: { type: 'integer' },
  sparkline: {
    type: 'array',
    description: '[count, UTC day] per day with warnings of this type',
    items: {
      type: 'array',
      minItems: 2,
      maxItems: 2,
      items: { type: ['integer', 'string'] },
      description: '[count, "YYYY-MM-DD"]',
    },
  },
  warnings: { type: 'array', items: warningSchema },
});

const serialize = (summary: WarningSummary) => ({
  type: summary.type,
  lastSeen: isoTimestamp(summary.lastSeen),
  count: summary.count,
  sparkline: summary.sparkline,
  warnings: summary.warnings.map((w) => ({ type: w.type, timestamp: isoTimestamp(w.timestamp), details: w.details })),
});

export const ingestionWarningRoutes = [
  defineRoute({
    method: 'GET',
    path: '/api/projects/:project_id/ingestion_warnings',
    summary: 'Events of the last 30 days capture accepted but dropped or altered, grouped by warning type',
    tags: ['ingestion warnings'],
    // PostHog marks this endpoint INTERNAL (no personal API key reaches it); here the project's read scope does.
    scopes: ['project:read'],
    query: listQuery,
    responses: {
      200: {
        description: 'One summary per type, most recently seen first',
        schema: record({ results: { type: 'array', items: summarySchema } }),
      },
    },
    handler: async (ctx) => {
      const { q, type, examples } = ctx.state.query;
      const summaries = await warningSummaries(ctx.state.em, ctx.state.project.id, {
        examples: examples ?? 50,
        search: q,
        type,
      });
      ctx.body = { results: summaries.map(serialize) };
    },
  }),
];
