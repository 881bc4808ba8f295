import { MikroORM, defineConfig } from '@mikro-orm/postgresql';
import { Migrator } from '@mikro-orm/migrations';
import { config, envBool, envInt } from '../config.ts';
import { entities } from '../entities/index.ts';
import { migrationsList } from './migrations/index.ts';
import pg from 'pg';

export function ormConfig(databaseUrl = config.databaseUrl) {
  return defineConfig({
    clientUrl: databaseUrl,
    entities,
    extensions: [Migrator],
    migrations: { migrationsList, tableName: 'mikro_orm_migrations', transactional: true, allOrNothing: true, snapshot: false, silent: true },
    pool: { min: 0, max: envInt('DATABASE_POOL_MAX', 10) },
    driverOptions: { options: sessionOptions() },
    debug: process.env.ORM_DEBUG === '1',
  });
}

/**
 * Settings every session of this service starts with (pg's `options`). JIT compilation costs 50–100 ms
 * on any statement the planner thinks expensive (a thousand-key deletion check, a search over a
 * million persons), far more than it saves on ours.
 */
export function sessionOptions(): string {
  return `-c jit=${envBool('DATABASE_JIT', false) ? 'on' : 'off'}`;
}

export type Orm = MikroORM;

export async function initOrm(databaseUrl = config.databaseUrl): Promise<MikroORM> {
  return MikroORM.init(ormConfig(databaseUrl));
}

// Any fixed number works; it only has to be the same for every process that migrates.
const MIGRATION_LOCK_ID = 724_311_001;

/**
 * Applies pending migrations. A session advisory lock, held on a connection of its own,
 * makes concurrent callers (several test workers, api + worker at start-up) take turns.
 */
export async function migrate(orm: MikroORM, databaseUrl = config.databaseUrl): Promise<string[]> {
  const lock = new pg.Client({ connectionString: databaseUrl });
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
