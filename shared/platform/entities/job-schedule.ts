import { defineEntity, p } from '@mikro-orm/core';

/** A worker cron schedule, the one source of truth for every worker (`npm run manage -- schedule set`). */
export const JobSchedule = defineEntity({
  name: 'JobSchedule',
  tableName: 'job_schedule',
  properties: {
    id: p.string().length(100).primary(),
    pattern: p.string().length(200),
    updatedAt: p.datetime().defaultRaw('now()'),
  },
});
