import { type EntityManager, MikroORM, defineConfig } from '@mikro-orm/postgresql';
import { Migrator } from '@mikro-orm/migrations';
import { config } from '../config.ts';
import { entities } from '../entities/index.ts';
import { migrationsList } from './migrations/index.ts';
import { PostgresNamingStrategy } from './naming.ts';
import pg from 'pg';
import { isoTimestamp } from '../time.ts';
import { rows } from './sql.ts';

export function ormConfig(databaseUrl = config.databaseUrl, poolMax = config.databasePoolMax) {
  return defineConfig({
    clientUrl: databaseUrl,
    entities,
    namingStrategy: PostgresNamingStrategy,
    extensions: [Migrator],
    migrations: {
      migrationsList,
      tableName: 'mikro_orm_migrations',
      transactional: true,
      allOrNothing: true,
      snapshot: false,
      silent: true,
    },
    pool: { min: 0, max: poolMax },
    debug: config.ormDebug,
  });
}

export type Orm = MikroORM;

export async function initOrm(databaseUrl = config.databaseUrl, poolMax = config.databasePoolMax): Promise<MikroORM> {
  return MikroORM.init(ormConfig(databaseUrl, poolMax));
}

// Any fixed number works; it only has to be the same for every process that migrates.
const MIGRATION_LOCK_ID = 724_311_001;

/**
 * Applies pending migrations. A session advisory lock, held on a direct connection of its own (a
 * transaction-mode pooler would hand the session to others), makes concurrent callers (several test
 * workers, api + worker at start-up) take turns; the migrations themselves run in one transaction,
 * which a pooler keeps on one server connection.
 */
export async function migrate(orm: MikroORM, directUrl = config.databaseDirectUrl): Promise<string[]> {
  const lock = new pg.Client({ connectionString: directUrl });
  await lock.connect();
  try {
    await lock.query('select pg_advisory_lock($1)', [MIGRATION_LOCK_ID]);
    const applied = await orm.migrator.up();
    return applied.map((m) => m.name);
  } finally {
    await lock.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK_ID]).catch(() => undefined);
    await lock.end();
  }
}

export interface MigrationState {
  name: string;
  status: 'applied' | 'pending';
  applied_at: string | null;
}

/**
 * Every migration of this version, applied or pending, in order, then any a newer version applied.
 * `query` runs a statement on the database in question (a plain client for the CLI, rows() for the API).
 */
export async function migrationStates(
  query: (sql: string) => Promise<{ name: string; executed_at: Date }[]>,
): Promise<MigrationState[]> {
  const done = await query('select name, executed_at from mikro_orm_migrations order by id').catch((error) => {
    if (error?.code === '42P01') return []; // no migration ever ran here
    throw error;
  });
  const applied = new Map(done.map((r) => [r.name, isoTimestamp(r.executed_at)!]));
  const known = new Set(migrationsList.map((m) => m.name));
  return [
    ...[...known].map((name) => ({
      name,
      status: applied.has(name) ? ('applied' as const) : ('pending' as const),
      applied_at: applied.get(name) ?? null,
    })),
    ...done
      .filter((r) => !known.has(r.name))
      .map((r) => ({ name: r.name, status: 'applied' as const, applied_at: applied.get(r.name)! })),
  ];
}

/** Readiness: PostgreSQL answers a statement through this EntityManager (throws otherwise). */
export async function databaseAnswers(em: EntityManager): Promise<void> {
  await rows(em, 'select 1');
}

/** This version's migrations the database has not applied yet, in order. */
export async function pendingMigrations(em: EntityManager): Promise<string[]> {
  const states = await migrationStates((statement) => rows(em, statement));
  return states.filter((migration) => migration.status === 'pending').map((migration) => migration.name);
}
