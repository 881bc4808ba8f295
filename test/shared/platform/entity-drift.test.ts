// The entities cannot drift from the migrations. Two checks, on databases of the test's own:
// 1. On an empty database brought up by the migrations alone, MikroORM's schema comparison against the
//    entities (what `schema:update` would run) proposes exactly the changes listed here, each something the
//    entity metadata cannot express, with the reason.
// 2. The comparison does not read what it cannot parse (an expression index is compared by name only) and
//    misses some column types, so a second database is created from the entities alone
//    (`orm.schema.create()`), and PostgreSQL's own description of every mapped table's columns, defaults,
//    constraints and indexes must be the same in both.
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { entities } from '../../../shared/platform/entities/index.ts';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { sql } from '../../db.ts';
import { ownDatabase } from '../../helpers.ts';

/**
 * The partitioned `event` table has no entity: it stays behind the event store (shared/events/), whose
 * engines (PostgreSQL, ClickHouse) each keep their own schema. MikroORM skips its partitions itself.
 */
const EVENT_STORE_TABLES = ['event'];
const UNMAPPED_TABLES = EVENT_STORE_TABLES.map((table) => `drop table if exists "${table}" cascade;`);

/**
 * Triggers. An entity's trigger (TriggerDef) runs a function of its own that MikroORM generates from the
 * body (`<table>_<trigger>_fn`); ours share one function called with arguments
 * (notify_flag_definitions_changed('project_id', 'filters,…')), read transition tables (`referencing old
 * table as …`) or fire on `update of <columns>`, none of which a TriggerDef says. (Its raw `expression`
 * form is not read by the comparison, so it would check nothing.) The comparison does not list the
 * truncate triggers.
 */
const TRIGGERS: [table: string, trigger: string][] = [
  // 0017: a key's grants may have changed (api/http/auth-cache.ts).
  ['personal_api_key', 'personal_api_key_auth_changed'],
  ['app_user', 'app_user_auth_changed'],
  ['organization_membership', 'organization_membership_auth_changed'],
  ['project', 'project_auth_changed'],
  // 0023: a flag definition may have changed (the flags' definition cache).
  ...['feature_flag', 'experiment_holdout', 'cohort', 'project'].flatMap((table) =>
    ['insert', 'update', 'delete'].map((event): [string, string] => [table, `${table}_flags_${event}`]),
  ),
  // 0049: a distinct id's suppression may have changed (api/capture/suppression-cache.ts).
  ['deletion_suppression', 'deletion_suppression_changed'],
  // 0051: a distinct id's person changed (the ClickHouse mirror's outbox, shared/events/shipper.ts).
  ...['insert', 'update', 'delete'].map((op): [string, string] => [
    'person_distinct_id',
    `person_distinct_id_${op}_shipping`,
  ]),
  // 0052: when a distinct id got another person (incremental experiment results, shared/experiments/results.ts).
  ['person_distinct_id', 'person_distinct_id_moved'],
  // 0063: an experiment's parameters.allocation makes its flag sticky (the flags' definition cache).
  ['experiment', 'experiment_flags_insert'],
  ['experiment', 'experiment_flags_update'],
  // 0063: a deleted person's distinct ids forget their sticky variants.
  ['person_distinct_id', 'person_distinct_id_forget_sticky'],
  // 0061: a project's tracking plan changed (api/tracking-plan/cache.ts).
  ['tracking_plan_version', 'tracking_plan_version_changed'],
  // 0064: a merge moved a person's creation (the ClickHouse mirror carries it: shared/events/shipper.ts).
  ['person', 'person_created_at_shipping'],
];

/**
 * SQL functions the queries and indexes call (0011, 0019, 0041–0043). A routine in entity metadata has no
 * `stable`, `strict` or `parallel safe` (an index expression needs `immutable`, parallel builds need
 * `parallel safe`), nor a `returns setof`; its raw `expression` form is again not read by the comparison.
 */
const FUNCTIONS = [
  'ensure_event_partitions"(integer)',
  'iso_timestamp_odd"(text)',
  'iso_timestamp_utc"(text)',
  'regex_matches"(text, text)',
  'try_numeric"(text)',
  'try_timestamptz"(text)',
];

const ALLOWED = [
  ...UNMAPPED_TABLES,
  ...TRIGGERS.flatMap(([table, trigger]) => [
    `drop trigger if exists "${trigger}" on "${table}";`,
    `drop function if exists "${table}_${trigger}_fn"();`,
  ]),
  ...FUNCTIONS.map((signature) => `drop function if exists "${signature};`),
].sort();

/**
 * Table storage parameters: `fillfactor` leaves room on async_deletion's pages so that the per-chunk
 * progress updates are HOT (0016). An entity has no table storage parameters (only an index's fill factor).
 */
const TABLE_OPTIONS = { migrated: ['async_deletion {fillfactor=50}'], entities: ['async_deletion'] };

/** How PostgreSQL describes the tables: columns, table options, constraints and indexes, one line each. */
async function catalog(orm: MikroORM, tables: string[]) {
  const lines = (query: string) => sql<{ line: string }>(orm, query, [tables]).then((r) => r.map((x) => x.line).sort());
  return {
    columns: await lines(
      `select c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
              || case when a.attnotnull then ' not null' else '' end
              || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '') as line
         from pg_attribute a join pg_class c on c.oid = a.attrelid
         left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
        where c.relnamespace = 'public'::regnamespace and c.relname in (?) and a.attnum > 0 and not a.attisdropped`,
    ),
    tables: await lines(
      `select relname || coalesce(' ' || reloptions::text, '') as line from pg_class
        where relnamespace = 'public'::regnamespace and relkind = 'r' and relname in (?)`,
    ),
    constraints: await lines(
      `select conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) as line from pg_constraint
        where connamespace = 'public'::regnamespace and conrelid::regclass::text in (?)`,
    ),
    indexes: await lines(`select indexdef as line from pg_indexes where schemaname = 'public' and tablename in (?)`),
  };
}

describe('entities against the migrated schema', () => {
  let orm: MikroORM;
  let fromEntities: MikroORM;
  beforeAll(async () => {
    orm = await initOrm(await ownDatabase('entity_drift'), 2);
    fromEntities = await initOrm(await ownDatabase('entity_drift_created', { migrated: false }), 2);
    // Extensions the entities' indexes use (trigram operator classes, btree_gin's integer column in a GIN
    // index); a migration creates them, an entity cannot.
    await sql(fromEntities, 'create extension pg_trgm');
    await sql(fromEntities, 'create extension btree_gin');
    await fromEntities.schema.create();
  });
  afterAll(async () => {
    await orm?.close();
    await fromEntities?.close();
  });

  it('differ only where MikroORM cannot express the schema', async () => {
    const proposed = (await orm.schema.getUpdateSchemaSQL({ wrap: false }))
      .split('\n')
      .map((line) => line.trim())
      .filter(Boolean)
      .sort();
    expect(proposed).toEqual(ALLOWED);
  });

  it("map every table of the schema but the event store's and the migrations log", async () => {
    const tables = await sql<{ name: string }>(
      orm,
      `select c.relname as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'public' and c.relkind in ('r', 'p') and not c.relispartition order by 1`,
    );
    const mapped = entities.map((entity) => entity.meta.tableName).sort();
    expect(
      tables.map((t) => t.name).filter((name) => !EVENT_STORE_TABLES.includes(name) && name !== 'mikro_orm_migrations'),
    ).toEqual(mapped);
  });

  it('describe the same columns, defaults, constraints and indexes as the migrations', async () => {
    const tables = entities.map((entity) => entity.meta.tableName);
    const migrated = await catalog(orm, tables);
    const created = await catalog(fromEntities, tables);
    expect(migrated.tables.filter((t) => !TABLE_OPTIONS.migrated.includes(t))).toEqual(
      created.tables.filter((t) => !TABLE_OPTIONS.entities.includes(t)),
    );
    expect(migrated.tables).toEqual(expect.arrayContaining(TABLE_OPTIONS.migrated));
    expect(created.columns).toEqual(migrated.columns);
    expect(created.constraints).toEqual(migrated.constraints);
    expect(created.indexes).toEqual(migrated.indexes);
  });
});
