// The one way to run raw SQL: rows() and run() go through MikroORM's connection and always inside
// the caller's transaction when there is one (em.getTransactionContext()), so a statement cannot
// silently run outside it. Placeholders are `?`, and an array parameter is expanded into a list
// (for `in (?)`); to pass a PostgreSQL array, send a literal with pgArray() and cast it: `= any(?::int[])`.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Pool } from 'pg';

/** The part of MikroORM's transaction context (a Kysely transaction) runBound() uses. */
interface ControlledTransaction {
  executeQuery(query: {
    sql: string;
    parameters: readonly unknown[];
    query: { kind: 'RawNode'; sqlFragments: string[]; parameters: unknown[] };
    queryId: { queryId: string };
  }): Promise<{ numAffectedRows?: bigint }>;
}

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

let boundQueries = 0;

/**
 * Runs a statement written with `$1, $2…` placeholders, its parameters sent beside the text
 * (PostgreSQL's extended protocol) instead of formatted into it, inside the caller's transaction when
 * there is one; returns how many rows it changed. For large multi-row statements: formatting and
 * escaping every value into the text was the largest part of MikroORM's share of the API's CPU in
 * bench/ingestion, and PostgreSQL then lexed them back out of it. ORM_DEBUG keeps MikroORM's path.
 */
export async function runBound(em: EntityManager, sql: string, params: readonly unknown[]): Promise<number> {
  const transaction = em.getTransactionContext<ControlledTransaction>();
  if (em.config.get('debug')) return run(em, sql.replace(/\$\d+/g, '?'), params);
  if (!transaction) {
    const pool = (await em.getConnection().getNativeClient()) as Pool;
    return (await pool.query(sql, params as unknown[])).rowCount ?? 0;
  }
  // A compiled raw query, as Kysely's CompiledQuery.raw() makes one (its pg driver sends sql and parameters).
  const result = await transaction.executeQuery({
    sql,
    parameters: params,
    query: { kind: 'RawNode', sqlFragments: [sql], parameters: [] },
    queryId: { queryId: `bound-${++boundQueries}` },
  });
  return Number(result.numAffectedRows ?? 0);
}

/** A PostgreSQL identifier quoted (a table's name in a statement). */
export const quoteIdent = (name: string) => `"${name.replace(/"/g, '""')}"`;

/** A PostgreSQL array literal, e.g. pgArray(['a', 'b"c']) → {"a","b\"c"}. */
export function pgArray(values: readonly (string | number)[]): string {
  return `{${values.map((v) => (typeof v === 'number' ? String(v) : `"${String(v).replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`)).join(',')}}`;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Whether `value` can be bound as a uuid parameter (checked first, so a bad id is a 4xx, not a database error). */
export const isUuid = (value: string) => UUID.test(value);

/** An ILIKE pattern matching `text` anywhere, with %, _ and \ in it taken literally. */
export const containsPattern = (text: string) => `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

/** A statement with `?` placeholders, each replaced by `$name` in turn, for a receipt. */
export function namedStatement(sql: string, names: string[]): string {
  let i = 0;
  return sql.replace(/\?/g, () => `$${names[i++] ?? '?'}`).replace(/\s+/g, ' ');
}
