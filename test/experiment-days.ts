// An experiment's stored days beside the computation from the start, for the results tests.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { EventStore } from '../shared/events/event-store.ts';
import { computeExperimentSeries, experimentForResults } from '../shared/experiments/results.ts';
import { sql } from './db.ts';
import { ownDatabase } from './helpers.ts';
import { clickHouseWorld } from './clickhouse.ts';

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

/** The results job's world with EVENT_STORE=clickhouse (clickHouseWorld) on a PostgreSQL database of its own (`<name>_clickhouse`). */
export async function clickHouseResultsWorld(name: string) {
  return clickHouseWorld(name, { databaseUrl: await ownDatabase(`${name}_clickhouse`) });
}
