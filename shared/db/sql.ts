// The one way to run raw SQL: rows() and run() go through MikroORM's connection and always inside
// the caller's transaction when there is one (em.getTransactionContext()), so a statement cannot
// silently run outside it. Placeholders are `?`, and an array parameter is expanded into a list
// (for `in (?)`); to pass a PostgreSQL array, send a literal with pgArray() and cast it: `= any(?::int[])`.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Pool } from 'pg';

/**
 * The rows a statement returns. Outside a transaction the statement goes straight to the pool MikroORM
 * opened, formatted by MikroORM as it would be: its query layer (logging, the query builder's executor)
 * was a tenth of the API's CPU on a GET by id (bench/persons.ts). ORM_DEBUG keeps every statement on
 * MikroORM's path, so its log shows them all.
 */
export async function rows<T = Record<string, unknown>>(
  em: EntityManager,
  sql: string,
  params: readonly unknown[] = [],
): Promise<T[]> {
  const transaction = em.getTransactionContext();
  const connection = em.getConnection();
  if (transaction || em.config.get('debug'))
    return connection.execute<T[]>(sql, params as unknown[], 'all', transaction);
  const pool = (await connection.getNativeClient()) as Pool;
  return (await pool.query(em.getPlatform().formatQuery(sql, params as unknown[]))).rows;
}

/** Runs a statement and returns how many rows it changed. */
export async function run(em: EntityManager, sql: string, params: readonly unknown[] = []): Promise<number> {
  const result = await em
    .getConnection()
    .execute<{ affectedRows: number }>(sql, params as unknown[], 'run', em.getTransactionContext());
  return result.affectedRows;
}

/** A PostgreSQL array literal, e.g. pgArray(['a', 'b"c']) → {"a","b\"c"}. */
export function pgArray(values: readonly (string | number)[]): string {
  return `{${values.map((v) => (typeof v === 'number' ? String(v) : `"${String(v).replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`)).join(',')}}`;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Whether `value` can be bound as a uuid parameter (checked first, so a bad id is a 4xx, not a database error). */
export const isUuid = (value: string) => UUID.test(value);

/** An ILIKE pattern matching `text` anywhere, with %, _ and \ in it taken literally. */
export const containsPattern = (text: string) => `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
