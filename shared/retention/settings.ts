// A project's settings changed through PATCH /api/projects/:id/ (its name and retention days), with an
// activity-log entry per change in the same transaction.
import type { EntityManager } from '@mikro-orm/postgresql';
import { recordActivity, type Actor, type ActivityChange } from '../activity-log.ts';
import { rows } from '../db/sql.ts';

/** Settings a PATCH may change: API field → column. */
const COLUMNS = {
  name: 'name',
  event_retention_days: 'event_retention_days',
  recording_retention_days: 'recording_retention_days',
} as const;

export type ProjectSettings = { -readonly [K in keyof typeof COLUMNS]?: K extends 'name' ? string : number | null };

/** Applies the given settings; returns the fields that changed (empty: nothing did, and nothing is logged). */
export async function updateProjectSettings(
  em: EntityManager,
  actor: Actor,
  settings: ProjectSettings,
): Promise<string[]> {
  const fields = (Object.keys(COLUMNS) as (keyof typeof COLUMNS)[]).filter((f) => settings[f] !== undefined);
  if (fields.length === 0) return [];
  return em.transactional(async (tx) => {
    const t = tx;
    const [before] = await rows<Record<string, unknown>>(
      t,
      `select ${fields.map((f) => COLUMNS[f]).join(', ')} from project where id = ? for update`,
      [actor.projectId],
    );
    const changed = fields.filter((f) => before[COLUMNS[f]] !== settings[f]);
    if (changed.length === 0) return [];
    await rows(
      t,
      `update project set ${changed.map((f) => `${COLUMNS[f]} = ?`).join(', ')}, updated_at = now() where id = ?`,
      [...changed.map((f) => settings[f]), actor.projectId],
    );
    const changes: ActivityChange[] = changed.map((f) => ({
      type: 'Project',
      action: 'changed',
      field: f,
      before: before[COLUMNS[f]],
      after: settings[f],
    }));
    const [{ name }] = await rows<{ name: string }>(t, `select name from project where id = ?`, [actor.projectId]);
    await recordActivity(t, {
      ...actor,
      scope: 'Project',
      itemId: String(actor.projectId),
      activity: 'updated',
      detail: { changes, name },
    });
    return changed;
  });
}
