// Keeps ClickHouse's person_distinct_id mirror equal to PostgreSQL's table, one project at a time:
// every distinct id whose person differs (a merge or alias moved it, a split, a new person) is
// written again, and every one PostgreSQL no longer has (a deleted person) is marked deleted.
//
// Why a mirrored mapping joined at query time, not PostHog's person overrides: our analytics define a
// person's events as those of its *current* distinct ids (analytics.ts joins person_distinct_id), so
// PostgreSQL and ClickHouse give the same answers only if ClickHouse resolves persons the same way.
// Overrides patch the person_id stamped on each event at ingestion and need a squash job to fold
// them in; here personless events (no person_id) and persons merged long after their events count
// correctly with no rewrite of events, and a deleted person drops out as soon as its rows do.
import type { EntityManager } from '@mikro-orm/postgresql';
import { rows } from '../platform/db/sql.ts';
import type { ClickHouseEventStore, DistinctIdMapping } from './clickhouse.ts';

/** A person's created_at as the mirror keeps it (DateTime64's text, UTC, microseconds), in SQL over `column`. */
export const mirroredCreatedAt = (column: string) =>
  `to_char(${column} at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')`;

/** Brings the project's mirror up to date; returns how many mappings were written. */
export async function mirrorProjectDistinctIds(
  em: EntityManager,
  store: ClickHouseEventStore,
  projectId: number,
): Promise<number> {
  const current = await rows<{ distinct_id: string; person_id: string; created_at: string }>(
    em,
    `select d.distinct_id, d.person_id::text as person_id, ${mirroredCreatedAt('p.created_at')} as created_at
       from person_distinct_id d join person p on p.id = d.person_id where d.project_id = ?`,
    [projectId],
  );
  const mirrored = await store.distinctIdMappings(projectId);
  const changes: DistinctIdMapping[] = [];
  for (const row of current) {
    const was = mirrored.get(row.distinct_id);
    if (was?.personId !== row.person_id || was.createdAt !== row.created_at)
      changes.push({
        projectId,
        distinctId: row.distinct_id,
        personId: row.person_id,
        personCreatedAt: row.created_at,
      });
    mirrored.delete(row.distinct_id);
  }
  for (const distinctId of mirrored.keys())
    changes.push({ projectId, distinctId, personId: null, personCreatedAt: null });
  await store.mirrorDistinctIds(changes);
  return changes.length;
}
