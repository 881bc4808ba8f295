import type { EntityManager } from '@mikro-orm/postgresql';
import { recordActivity, type Actor, type ActivityChange } from '../platform/activity-log.ts';
import { db } from '../platform/db/kysely.ts';
import { updateProjectSettings as writeProjectSettings } from '../accounts/index.ts';

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
    const before = await db(tx)
      .selectFrom('project')
      .select(Object.values(COLUMNS))
      .where('id', '=', actor.projectId)
      .forUpdate()
      .executeTakeFirstOrThrow();
    const changed = fields.filter((f) => before[COLUMNS[f]] !== settings[f]);
    if (changed.length === 0) return [];
    const value = <K extends keyof typeof COLUMNS>(f: K) => (changed.includes(f) ? settings[f] : undefined);
    // Fields left undefined are not set.
    const { name } = await writeProjectSettings(tx, actor.projectId, {
      name: value('name'),
      event_retention_days: value('event_retention_days'),
      recording_retention_days: value('recording_retention_days'),
    });
    const changes: ActivityChange[] = changed.map((f) => ({
      type: 'Project',
      action: 'changed',
      field: f,
      before: before[COLUMNS[f]],
      after: settings[f],
    }));
    await recordActivity(tx, {
      ...actor,
      scope: 'Project',
      itemId: String(actor.projectId),
      activity: 'updated',
      detail: { changes, name },
    });
    return changed;
  });
}
