import { MikroORM, defineConfig } from '@mikro-orm/postgresql';
import { Migrator } from '@mikro-orm/migrations';
import { config } from '../config.ts';
import { entities } from '../entities/index.ts';
import { migrationsList } from './migrations/index.ts';
import pg from 'pg';
import type { EntityManager } from '@mikro-orm/postgresql';
import { rows } from './sql.ts';

export function ormConfig(databaseUrl = config.databaseUrl, poolMax = config.databasePoolMax) {
  return defineConfig({
    clientUrl: databaseUrl,
    entities,
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

/** The migrations of this version that the database behind `em` has not applied, in order. */
export async function pendingMigrations(em: EntityManager): Promise<string[]> {
  const [table] = await rows<{ present: boolean }>(
    em,
    `select to_regclass('mikro_orm_migrations') is not null as present`,
  );
  const applied = table.present
    ? new Set((await rows<{ name: string }>(em, 'select name from mikro_orm_migrations')).map((row) => row.name))
    : new Set<string>();
  return migrationsList.map((migration) => migration.name).filter((name) => !applied.has(name));
}
