// When deletion requests run. Which endpoint uses which window is decided here, and so is when a
// window last opened (from its cron), so a worker can release overdue requests from PostgreSQL
// alone, whether or not Redis still holds the schedulers.
import { CronExpressionParser } from 'cron-parser';
import type { Schedule } from '../platform/schedules.ts';

export type DeletionType = 'person_events' | 'person_recordings';
/**
 * weekly: the Sunday 05:00 UTC batch (DELETE person and bulk_delete with delete_events);
 * off_peak: the nightly window (POST delete_events); immediate: as soon as possible (recordings).
 */
export type DeletionMode = 'weekly' | 'off_peak' | 'immediate';
export type ScheduledDeletionMode = Exclude<DeletionMode, 'immediate'>;

/** The release cron of each scheduled mode, from the schedules the workers follow. */
export function deletionCrons(schedules: Schedule[]): Record<ScheduledDeletionMode, string> {
  const pattern = (id: string) => schedules.find((s) => s.schedulerId === id)!.pattern;
  return { weekly: pattern('deletion-weekly-batch'), off_peak: pattern('deletion-off-peak') };
}

/** When the mode's window last opened, at or before `now`. */
export function lastWindowStart(cron: string, now = new Date()): Date {
  return CronExpressionParser.parse(cron, { currentDate: now, tz: 'UTC' }).prev().toDate();
}

/** When the mode's window next opens, after `now` (a request made now is released then). */
export function nextWindowStart(cron: string, now = new Date()): Date {
  return CronExpressionParser.parse(cron, { currentDate: now, tz: 'UTC' }).next().toDate();
}
