// An experiment's stored days beside the computation from the start, for the results tests.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { EventStore } from '../shared/events/event-store.ts';
import { computeExperimentSeries, experimentForResults } from '../shared/experiments/results.ts';
import { sql } from './db.ts';
import { loadConfig } from '../shared/platform/config.ts';
import { initOrm } from '../shared/platform/db/orm.ts';
import { createClickHouseEventStore } from '../shared/events/clickhouse.ts';
import { withPostgresSource } from '../shared/events/create.ts';
import { createPostgresEventStore } from '../shared/events/postgres.ts';
import { logger } from '../shared/platform/logger.ts';
import type { WorkerDeps } from '../worker/deps.ts';
import { ownDatabase } from './helpers.ts';
import { chdbClient, chdbDatabase } from './clickhouse.ts';

/** The experiment's row joined with its flag's key and filters (what the results job reads). */
export async function experimentRow(orm: MikroORM, id: number) {
  const [row] = await sql(
    orm,
    `select x.*, f.key as flag_key, f.filters as flag_filters from experiment x join feature_flag f on f.id = x.feature_flag_id where x.id = ?`,
    [id],
  );
  return row;
}

/**
 * Each metric's stored days (results, by day) and the computation from the start through `events` as
 * of `now` (what they must equal), with the experiment's row and every stored row.
 */
export async function storedAndFull(orm: MikroORM, events: EventStore, id: number, now: Date) {
  const row = await experimentRow(orm, id);
  const full = await computeExperimentSeries(
    orm.em.fork() as EntityManager,
    events,
    experimentForResults(row),
    row.metrics,
    new Date(now.getTime() + 1),
  );
  const stored = await sql(
    orm,
    `select metric_uuid, result from experiment_metric_result where experiment_id = ? order by day`,
    [id],
  );
  const metrics = row.metrics as { uuid: string }[];
  return {
    row,
    stored,
    full: full.map((series) => JSON.parse(JSON.stringify(series))),
    days: metrics.map((m) => stored.filter((r) => r.metric_uuid === m.uuid).map((r) => r.result)),
  };
}

/**
 * The results job's world with EVENT_STORE=clickhouse: a database of its own (`<name>_clickhouse`), a chDB
 * database (`<name>`) migrated, the PostgreSQL store beside it, and worker deps reading through both.
 */
export async function clickHouseResultsWorld(name: string) {
  const config = loadConfig();
  const orm = await initOrm(await ownDatabase(`${name}_clickhouse`), 2);
  const ch = createClickHouseEventStore(chdbClient(), chdbDatabase(name), orm);
  await ch.migrate();
  const pg = createPostgresEventStore(orm, { deleteChunk: 1000 });
  const deps = { config, orm, events: withPostgresSource(pg, ch, orm), logger } as unknown as WorkerDeps;
  return { orm, ch, pg, deps };
}
