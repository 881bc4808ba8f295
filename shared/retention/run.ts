// A retention run and its preview. A run draws each project's lines (rules.ts), drops the monthly
// event partitions that hold only rows past their projects' lines, deletes every other row past a
// line by range in chunks (events, through the event store: with ClickHouse its copies go too; then
// recordings with their snapshots), and records per project
// what it removed (retention_run). The preview computes the same plan and counts without removing.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { EventStore } from '../events/index.ts';
import { eventPartitions, type MonthPartition } from '../events/index.ts';
import {
  linesAt,
  mayDropPartition,
  type ProjectLines,
  type ProjectRetention,
  type RetentionCounts,
  retentionCutoff,
} from './rules.ts';
import {
  countProjectEventsIn,
  deleteProjectEventsBefore,
  dropPartitionIfOnly,
  eventsPerProjectIn,
  projectsInPartition,
} from '../events/index.ts';
import {
  countEventsBefore,
  countRecordingsBefore,
  deleteRecordingsChunk,
  insertRetentionRun,
  projectRetentions,
} from './store.ts';

export interface RetentionPlan {
  at: Date;
  lines: ProjectLines[];
  /** Monthly partitions to drop whole, with the projects whose rows they hold. */
  drops: { partition: MonthPartition; projects: number[] }[];
}

/** What a run at `at` would do: every project's lines, and the months that may go whole. */
export async function planRetention(em: EntityManager, at: Date): Promise<RetentionPlan> {
  const lines = linesAt(await projectRetentions(em), at);
  const cutoffs = new Map(lines.map((l) => [l.projectId, l.eventCutoff]));
  const latest = Math.max(-Infinity, ...lines.map((l) => l.eventCutoff?.getTime() ?? -Infinity));
  const drops: RetentionPlan['drops'] = [];
  for (const partition of (await eventPartitions(em)).months) {
    // Only months entirely before some project's line can qualify; the others are not read at all.
    if (partition.to.getTime() > latest) continue;
    const projects = await projectsInPartition(em, partition.name);
    if (mayDropPartition(partition, projects, cutoffs)) drops.push({ partition, projects });
  }
  return { at, lines, drops };
}

export type RetentionPreview = RetentionCounts &
  Pick<ProjectRetention, 'eventRetentionDays' | 'recordingRetentionDays'>;

/**
 * What the run at `at` removes from `projectId`, with its settings as they are now (read here, and
 * answered with the counts: the caller's project row may be older, e.g. the API's auth cache).
 */
export async function previewRetention(
  em: EntityManager,
  events: EventStore,
  projectId: number,
  at: Date,
): Promise<RetentionPreview> {
  const plan = await planRetention(em, at);
  const [settings] = await projectRetentions(em, projectId);
  const eventRetentionDays = settings?.eventRetentionDays ?? null;
  const recordingRetentionDays = settings?.recordingRetentionDays ?? null;
  const eventCutoff = retentionCutoff(eventRetentionDays, at);
  const recordingCutoff = retentionCutoff(recordingRetentionDays, at);
  const counts: RetentionPreview = {
    eventRetentionDays,
    recordingRetentionDays,
    eventCutoff,
    recordingCutoff,
    events: 0,
    eventsInDroppedPartitions: 0,
    partitionsDropped: [],
    recordings: 0,
    snapshots: 0,
  };
  if (eventCutoff) {
    counts.events = await countEventsBefore(events, projectId, eventCutoff);
    for (const drop of plan.drops.filter((d) => d.projects.includes(projectId))) {
      counts.partitionsDropped.push(drop.partition.name);
      counts.eventsInDroppedPartitions += await countProjectEventsIn(em, drop.partition.name, projectId);
    }
  }
  if (recordingCutoff) Object.assign(counts, await countRecordingsBefore(em, projectId, recordingCutoff));
  return counts;
}

export interface RunOptions {
  /** Rows per delete statement (events), recordings per transaction a fiftieth of it. */
  chunk: number;
  /**
   * How long a partition drop waits for the event table's lock, and how often it tries (a second
   * apart) before its rows are deleted by range instead.
   */
  lockTimeoutMs: number;
  lockAttempts: number;
  jobId?: string | null;
  /** After each chunk (progress, lease renewal). */
  onProgress?: (removed: number) => Promise<void> | void;
  onDropSkipped?: (partition: string, why: 'kept' | 'busy') => void;
  /**
   * The event store the rows past a line are deleted through (PostgreSQL's by range in chunks, and
   * with ClickHouse its copies too); without it, PostgreSQL's rows only. Partition drops are PostgreSQL's.
   */
  events?: EventStore;
}

export interface RunResult {
  projects: (RetentionCounts & { projectId: number })[];
  partitionsDropped: string[];
  /** Partitions and tables rows were deleted from (to vacuum). */
  tablesDeletedFrom: string[];
  /**
   * Milliseconds of each partition drop: `locked`, the event table locked (lock, check, detach);
   * `drop`, dropping the detached table afterwards (its files freed).
   */
  dropMs: Record<string, { locked: number; drop: number }>;
}

/** A retention run at `at`: removes what previewRetention(…, at) counts, and records it per project. */
export async function runRetention(em: EntityManager, at: Date, options: RunOptions): Promise<RunResult> {
  const startedAt = new Date();
  const plan = await planRetention(em, at);
  const byProject = new Map(
    plan.lines.map((l) => [
      l.projectId,
      {
        projectId: l.projectId,
        eventCutoff: l.eventCutoff,
        recordingCutoff: l.recordingCutoff,
        events: 0,
        eventsInDroppedPartitions: 0,
        partitionsDropped: [] as string[],
        recordings: 0,
        snapshots: 0,
      },
    ]),
  );
  const result: RunResult = { projects: [], partitionsDropped: [], tablesDeletedFrom: [], dropMs: {} };
  let removed = 0;

  for (const { partition, projects } of plan.drops) {
    // Counted before the drop for the records (a drop reads no rows); the drop then checks under its
    // lock that no other project's row has arrived since.
    const counts = await eventsPerProjectIn(em, partition.name);
    const timings: { lockedMs?: number; dropMs?: number } = {};
    let outcome = await dropPartitionIfOnly(em, partition.name, projects, options.lockTimeoutMs, timings);
    for (let attempt = 1; outcome === 'busy' && attempt < options.lockAttempts; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 1000));
      outcome = await dropPartitionIfOnly(em, partition.name, projects, options.lockTimeoutMs, timings);
    }
    if (outcome !== 'dropped') {
      // Its rows past their lines are deleted by range below, as in any other partition.
      options.onDropSkipped?.(partition.name, outcome);
      continue;
    }
    result.dropMs[partition.name] = { locked: timings.lockedMs ?? 0, drop: timings.dropMs ?? 0 };
    result.partitionsDropped.push(partition.name);
    for (const [projectId, n] of counts) {
      const p = byProject.get(projectId)!;
      p.events += n;
      p.eventsInDroppedPartitions += n;
      p.partitionsDropped.push(partition.name);
      removed += n;
    }
    await options.onProgress?.(removed);
  }

  const touched = new Set<string>();
  for (const p of byProject.values()) {
    if (p.eventCutoff) {
      const onDeleted = async (n: number, partition: string) => {
        if (n > 0) touched.add(partition);
        p.events += n;
        removed += n;
        await options.onProgress?.(removed);
      };
      // Through the event store when given (with ClickHouse, its copies go too); PostgreSQL's rows otherwise.
      if (options.events) {
        const before = p.events;
        const n = await options.events.deleteEventsBefore(p.projectId, p.eventCutoff, {
          chunk: options.chunk,
          onDeleted,
        });
        // Events no PostgreSQL statement reported: with ClickHouse, those only it held (trimmed from
        // PostgreSQL's buffer, shared/events/buffer.ts).
        const unreported = n - (p.events - before);
        if (unreported > 0) {
          p.events += unreported;
          removed += unreported;
          await options.onProgress?.(removed);
        }
      } else await deleteProjectEventsBefore(em, p.projectId, p.eventCutoff, options.chunk, onDeleted);
    }
    if (p.recordingCutoff) {
      const perTransaction = Math.max(1, Math.floor(options.chunk / 50));
      for (;;) {
        const n = await deleteRecordingsChunk(em, p.projectId, p.recordingCutoff, perTransaction);
        if (n.recordings === 0) break;
        touched.add('session_recording').add('session_recording_snapshot');
        p.recordings += n.recordings;
        p.snapshots += n.snapshots;
        removed += n.recordings + n.snapshots;
        await options.onProgress?.(removed);
      }
    }
    await insertRetentionRun(em, { ...p, jobId: options.jobId ?? null, startedAt, finishedAt: new Date() });
    result.projects.push(p);
  }
  result.tablesDeletedFrom = [...touched];
  return result;
}
