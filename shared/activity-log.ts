// The activity log: one writer for every resource (persons, experiments, event definitions).
import type { EntityManager } from '@mikro-orm/postgresql';
import { pagedQuery } from './db/paged.ts';
import { randomUUID } from 'node:crypto';
import { rows } from './db/sql.ts';

export interface ActivityChange {
  type: string;
  action: 'changed' | 'created' | 'deleted' | 'merged' | 'split' | 'exported';
  field: string | null;
  before: unknown;
  after: unknown;
}

/** Who acted and in which project; spread into an entry (`{ ...actor, scope, … }`). */
export interface Actor {
  projectId: number;
  organizationId: string;
  userId: number;
  /** The personal API key the request came with (deletion receipts name it). */
  keyId?: string;
}

export interface ActivityEntry {
  projectId: number;
  organizationId?: string | null;
  /** null for system activity (ingestion, worker). */
  userId: number | null;
  scope: string;
  itemId: string;
  activity: string;
  detail: {
    changes?: ActivityChange[] | null;
    name?: string | null;
    short_id?: string | null;
    type?: string | null;
    trigger?: unknown;
  };
}

/** Writes an entry; pass the transaction's `em` so the entry commits with the change it records. */
export async function recordActivity(em: EntityManager, entry: ActivityEntry): Promise<void> {
  const detail = { changes: null, trigger: null, type: null, name: null, short_id: null, ...entry.detail };
  await rows(
    em,
    `insert into activity_log (id, project_id, organization_id, user_id, is_system, scope, item_id, activity, detail)
     values (?, ?, ?, ?, ?, ?, ?, ?, ?::jsonb)`,
    [
      randomUUID(),
      entry.projectId,
      entry.organizationId ?? null,
      entry.userId,
      entry.userId === null,
      entry.scope,
      entry.itemId,
      entry.activity,
      JSON.stringify(detail),
    ],
  );
}

/** A page of a scope's activity (optionally one item's), newest first, with the total. */
export function activityPage(
  em: EntityManager,
  projectId: number,
  scope: string,
  itemId: string | null,
  page: { limit: number; offset: number },
) {
  const where = `a.project_id = ? and a.scope = ?${itemId ? ' and a.item_id = ?' : ''}`;
  const from = {
    sql: `activity_log a left join app_user u on u.id = a.user_id where ${where}`,
    params: [projectId, scope, ...(itemId ? [itemId] : [])],
  };
  const order = 'order by a.created_at desc, a.id';
  return pagedQuery<Record<string, any>>(em, { select: 'a.*, u.first_name, u.email', from, order }, page);
}
