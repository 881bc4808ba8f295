import { Migration } from '@mikro-orm/migrations';

/**
 * The one source of truth for the workers' cron schedules. The first worker to start records its
 * settings (DELETION_WEEKLY_CRON, …); later workers use the recorded schedule and log where their
 * own settings disagree, instead of the last one to start silently re-scheduling everyone.
 * `npm run manage -- schedule set` changes a schedule; every worker applies it on its next reconcile.
 */
export class Migration0022JobSchedules extends Migration {
  override name = '0022-job-schedules';

  override up(): void {
    this.addSql(`create table job_schedule (
      id varchar(100) primary key,
      pattern varchar(200) not null,
      updated_at timestamptz not null default now()
    )`);
  }
}
