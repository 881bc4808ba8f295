// Response schemas of the operational endpoints.
import { record } from '../http/schemas.ts';

const state = { enum: ['ok', 'unavailable'] };

export const healthSchema = record({ status: { const: 'ok' } });

export const readinessSchema = record({
  status: state,
  checks: record({ postgres: state, redis: state }),
});
