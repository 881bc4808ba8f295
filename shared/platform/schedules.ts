// The workers' scheduled jobs: what runs when (defaults from the settings), and the recorded
// schedule in PostgreSQL (job_schedule), which every worker follows. Redis only holds BullMQ's
// schedulers made from it, so losing Redis loses nothing here.
import type { EntityManager } from '@mikro-orm/postgresql';
import { CronExpressionParser } from 'cron-parser';
import type { Config } from './config.ts';
import { sql } from 'kysely';
import { db } from './db/kysely.ts';
import type { JobKind } from './jobs.ts';

export interface Schedule {
  /** BullMQ scheduler id, and the row's id in job_schedule. */
  schedulerId: string;
  job: JobKind;
  /** UTC cron pattern. */
  pattern: string;
  data?: Record<string, unknown>;
  /** The setting a worker takes its default pattern from. */
  setting: string;
}

/** The retention job's scheduler (the preview reads when it next runs from its recorded pattern). */
export const RETENTION_SCHEDULER = 'retention-off-peak';

/** Every schedule, with the patterns this process's settings give (used only to seed the record). */
export const defaultSchedules = (
  config: Pick<Config, 'deletion' | 'schedules'> & Partial<Pick<Config, 'events' | 'accessExports'>>,
): Schedule[] => [
  {
    schedulerId: 'deletion-weekly-batch',
    job: 'releaseDeletions',
    data: { mode: 'weekly' },
    pattern: config.deletion.weeklyCron,
    setting: 'DELETION_WEEKLY_CRON',
  },
  {
    schedulerId: 'deletion-off-peak',
    job: 'releaseDeletions',
    data: { mode: 'off_peak' },
    pattern: config.deletion.offPeakCron,
    setting: 'DELETION_OFF_PEAK_CRON',
  },
  {
    schedulerId: 'experiment-results-daily',
    job: 'experimentResults',
    pattern: config.schedules.experimentResultsCron,
    setting: 'EXPERIMENT_RESULTS_CRON',
  },
  {
    schedulerId: 'experiment-guardrails',
    job: 'guardrailCheck',
    pattern: config.schedules.guardrailCheckCron,
    setting: 'GUARDRAIL_CHECK_CRON',
  },
  {
    schedulerId: 'experiment-bandits',
    job: 'banditReallocation',
    pattern: config.schedules.banditCron,
    setting: 'BANDIT_CRON',
  },
  {
    schedulerId: 'statistics-refresh',
    job: 'refreshStatistics',
    pattern: config.schedules.statisticsRefreshCron,
    setting: 'STATISTICS_REFRESH_CRON',
  },
  {
    schedulerId: 'event-partitions',
    job: 'ensureEventPartitions',
    pattern: config.schedules.eventPartitionsCron,
    setting: 'EVENT_PARTITIONS_CRON',
  },
  {
    // Retention runs in the deletion off-peak window: by default at the same time as its deletions.
    schedulerId: RETENTION_SCHEDULER,
    job: 'retention',
    pattern: config.deletion.offPeakCron,
    setting: 'DELETION_OFF_PEAK_CRON',
  },
  {
    schedulerId: 'access-export-expiry',
    job: 'expireAccessExports',
    pattern: config.accessExports?.expireCron ?? '7 * * * *',
    setting: 'ACCESS_EXPORT_EXPIRE_CRON',
  },
  ...(config.events?.engine === 'clickhouse'
    ? [
        {
          schedulerId: 'event-shipping',
          job: 'shipEvents' as const,
          pattern: config.schedules.eventShipCron,
          setting: 'EVENT_SHIP_CRON',
        },
      ]
    : []),
];

export interface ScheduleDisagreement {
  schedulerId: string;
  setting: string;
  mine: string;
  recorded: string;
}

/**
 * The schedules as recorded, after recording any that are not yet (with this process's patterns),
 * and where this process's settings disagree with the record.
 */
export async function recordedSchedules(
  em: EntityManager,
  defaults: Schedule[],
): Promise<{ schedules: Schedule[]; disagreements: ScheduleDisagreement[] }> {
  if (defaults.length > 0)
    await db(em)
      .insertInto('job_schedule')
      .values(defaults.map((s) => ({ id: s.schedulerId, pattern: s.pattern })))
      .onConflict((conflict) => conflict.column('id').doNothing())
      .execute();
  const schedules = await readSchedules(em, defaults);
  const recorded = new Map(schedules.map((s) => [s.schedulerId, s.pattern]));
  const disagreements = defaults
    .filter((s) => recorded.has(s.schedulerId) && recorded.get(s.schedulerId) !== s.pattern)
    .map((s) => ({
      schedulerId: s.schedulerId,
      setting: s.setting,
      mine: s.pattern,
      recorded: recorded.get(s.schedulerId)!,
    }));
  return { schedules, disagreements };
}

/** When a cron pattern next fires after `now`, in UTC as the workers run it. */
export const nextRun = (pattern: string, now = new Date()): Date =>
  CronExpressionParser.parse(pattern, { currentDate: now, tz: 'UTC' }).next().toDate();

/** The schedules as recorded, without recording anything (a process that only reads them). */
export async function readSchedules(em: EntityManager, defaults: Schedule[]): Promise<Schedule[]> {
  const recorded = new Map(
    (await db(em).selectFrom('job_schedule').select(['id', 'pattern']).execute()).map((r) => [r.id, r.pattern]),
  );
  return defaults.map((s) => ({ ...s, pattern: recorded.get(s.schedulerId) ?? s.pattern }));
}

/** Changes a recorded schedule (the workers apply it on their next reconcile). */
export async function setSchedule(em: EntityManager, id: string, pattern: string, known: Schedule[]): Promise<void> {
  if (!known.some((s) => s.schedulerId === id)) {
    throw new Error(`Unknown schedule ${id} (one of ${known.map((s) => s.schedulerId).join(', ')})`);
  }
  try {
    CronExpressionParser.parse(pattern, { tz: 'UTC' });
  } catch (error) {
    throw new Error(`Invalid cron pattern "${pattern}": ${(error as Error).message}`);
  }
  await db(em)
    .insertInto('job_schedule')
    .values({ id, pattern })
    .onConflict((conflict) =>
      conflict.column('id').doUpdateSet({ pattern: (eb) => eb.ref('excluded.pattern'), updated_at: sql`now()` }),
    )
    .execute();
}
