// Response schemas of the operational endpoints.
import { record } from '../http/schemas.ts';

const check = { enum: ['ok', 'unavailable', 'disabled'] };

export const healthSchema = record({ status: { const: 'ok' } });

export const readinessSchema = record(
  {
    /** degraded: ready, but an optional part (throttle, auth cache) is down. */
    status: { enum: ['ok', 'degraded', 'unavailable'] },
    checks: record(
      {
        postgres: check,
        redis: check,
        queues: check,
        throttle: check,
        auth_cache: check,
        migrations: check,
        /** Only with EVENT_STORE=clickhouse: events wait no longer than EVENT_SHIP_MAX_LAG_SECONDS to ship. */
        event_shipping: check,
        /** Only with EVENT_STORE=clickhouse: the ClickHouse server answers (analytics need it: 503 without). */
        clickhouse: check,
      },
      { optional: ['event_shipping', 'clickhouse'] },
    ),
    /** What each part that is down means for the service. */
    details: { type: 'object', additionalProperties: { type: 'string' } },
    /** Only with EVENT_STORE=clickhouse: seconds the oldest event not yet in ClickHouse has waited (0: none). */
    event_shipping_lag_seconds: { type: 'number', minimum: 0 },
  },
  { optional: ['details', 'event_shipping_lag_seconds'] },
);
