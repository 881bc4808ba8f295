// The activity log: one writer for every resource (persons, experiments, event definitions).
import type { EntityManager } from '@mikro-orm/postgresql';
import { randomUUID } from 'node:crypto';
import { db } from './db/kysely.ts';
import { pagedSelect } from './db/paged.ts';

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
  await db(em)
    .insertInto('activity_log')
    .values({
      id: randomUUID(),
      project_id: entry.projectId,
      organization_id: entry.organizationId ?? null,
      user_id: entry.userId,
      is_system: entry.userId === null,
      scope: entry.scope,
      item_id: entry.itemId,
      activity: entry.activity,
      detail,
    })
    .execute();
}

/** A page of a scope's activity (optionally one item's), newest first, with the total. */
export function activityPage(
  em: EntityManager,
  projectId: number,
  scope: string,
  itemId: string | null,
  page: { limit: number; offset: number },
) {
  const query = db(em)
    .selectFrom('activity_log as a')
    .leftJoin('app_user as u', 'u.id', 'a.user_id')
    .selectAll('a')
    .select(['u.first_name', 'u.email'])
    .where('a.project_id', '=', projectId)
    .where('a.scope', '=', scope)
    .$if(!!itemId, (q) => q.where('a.item_id', '=', itemId))
    .orderBy('a.created_at', 'desc')
    .orderBy('a.id');
  return pagedSelect(em, query, page);
}
