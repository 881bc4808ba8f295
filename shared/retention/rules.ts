// Retention rules: where a project's line falls for a run, and which monthly event partitions a run
// may drop whole. Pure functions; the queries are in store.ts, the run in run.ts.
import type { Selectable } from 'kysely';
import type { DB } from '../platform/db/kysely.ts';

export const DAY_MS = 86_400_000;

/** The bounds of a project's retention setting, in days (the API's schema and the column's check). */
export const RETENTION_DAYS = { minimum: 1, maximum: 36_500 } as const;

/**
 * A run at `at` removes data older than its line: 00:00 UTC of the run's day, minus `days` days.
 * Day-aligned, so every run (and preview) of the same UTC day draws the same line. null: keep forever.
 */
export function retentionCutoff(days: number | null, at: Date): Date | null {
  if (days === null) return null;
  const dayStart = Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), at.getUTCDate());
  return new Date(dayStart - days * DAY_MS);
}

type ProjectRow = Selectable<DB['project']>;

/** A project's retention settings: its entity's columns (store.ts projectRetentions reads them). */
export interface ProjectRetention {
  projectId: ProjectRow['id'];
  eventRetentionDays: ProjectRow['event_retention_days'];
  recordingRetentionDays: ProjectRow['recording_retention_days'];
}

export interface ProjectLines {
  projectId: number;
  eventCutoff: Date | null;
  recordingCutoff: Date | null;
}

export const linesAt = (projects: ProjectRetention[], at: Date): ProjectLines[] =>
  projects.map((p) => ({
    projectId: p.projectId,
    eventCutoff: retentionCutoff(p.eventRetentionDays, at),
    recordingCutoff: retentionCutoff(p.recordingRetentionDays, at),
  }));

import type { MonthPartition } from '../events/index.ts';

/** What a run removes (or removed) from one project: the same fields in the preview and the record. */
export interface RetentionCounts {
  eventCutoff: Date | null;
  recordingCutoff: Date | null;
  /** Every event removed, in dropped partitions or by delete. */
  events: number;
  eventsInDroppedPartitions: number;
  partitionsDropped: string[];
  recordings: number;
  snapshots: number;
}

/**
 * The event table's partitions are shared by every project. A month may be dropped whole only when
 * every project with rows in it has an event line at or after the month's end: then each of those rows
 * is one its project's retention removes anyway. A month holding a row of any project that keeps it
 * (no retention, or a line inside or before the month) is never dropped; those projects' old rows are
 * deleted by range instead. An empty month is left alone (nothing to remove).
 */
export function mayDropPartition(
  partition: MonthPartition,
  projectsInIt: number[],
  eventCutoffs: Map<number, Date | null>,
): boolean {
  if (projectsInIt.length === 0) return false;
  return projectsInIt.every((id) => {
    const cutoff = eventCutoffs.get(id);
    return cutoff != null && cutoff.getTime() >= partition.to.getTime();
  });
}
