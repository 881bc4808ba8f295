// The read-access log's batch writes and its purge. A batch is one statement whatever its size: the
// rows travel as one JSON parameter (jsonb_to_recordset), so the statement's text never changes and is
// built once (`prepared`).
import type { EntityManager } from '@mikro-orm/postgresql';
import { sql } from 'kysely';
import { db, prepared } from '../platform/db/kysely.ts';

/** One row as the batch statement reads it (JSON), `timestamp` in epoch milliseconds. */
export interface AccessRow {
  project_id: number;
  user_id: number | null;
  api_key_id: string | null;
  action: string;
  person_uuids: string[];
  request_id: string | null;
  client_address: string | null;
  details: Record<string, unknown>;
  timestamp: number;
}

const insertRows = prepared((k, rows: string) =>
  k
    .insertInto('person_access_log')
    .columns([
      'project_id',
      'user_id',
      'api_key_id',
      'action',
      'person_uuids',
      'request_id',
      'client_address',
      'details',
      'timestamp',
    ])
    .expression(
      sql`select r.project_id, r.user_id, r.api_key_id, r.action, r.person_uuids, r.request_id, r.client_address,
                 coalesce(r.details, '{}'), to_timestamp(r.timestamp / 1000.0)
            from jsonb_to_recordset(${rows}::jsonb)
              as r(project_id int, user_id int, api_key_id varchar, action varchar, person_uuids uuid[],
                   request_id varchar, client_address varchar, details jsonb, timestamp float8)`,
    ),
);

/** Inserts the rows in one statement (none: nothing). */
export async function insertAccessRows(em: EntityManager, rows: readonly AccessRow[]): Promise<void> {
  if (rows.length === 0) return;
  await insertRows(em, JSON.stringify(rows));
}

/** Deletes the reads recorded more than `days` days ago (of every project); returns how many. */
export async function purgeAccessLog(em: EntityManager, days: number): Promise<number> {
  const { numDeletedRows } = await db(em)
    .deleteFrom('person_access_log')
    .where('timestamp', '<', sql<Date>`now() - make_interval(days => ${days})`)
    .executeTakeFirst();
  return Number(numDeletedRows);
}
