// The ClickHouse event store's schema and its own migrations (applied in order, each recorded in
// `schema_migrations` of the store's database; DDL is idempotent, so a migration interrupted before
// it was recorded runs again harmlessly).
//
// `events` follows PostHog's sharded_events: a ReplacingMergeTree (a row written twice by a retried
// batch collapses on merge; reads that count are exact by uuid anyway), monthly partitions by event
// time, ordered by project, day, event name and person key (the distinct id: the person an event
// belongs to is resolved at query time, see `person_distinct_id`), then uuid. Timestamps are
// DateTime64(6, 'UTC'): PostgreSQL's microseconds survive the copy, and funnels compare them as
// microsecond integers (windowFunnel takes DateTime or unsigned integers, not DateTime64).
//
// `person_distinct_id` mirrors PostgreSQL's table of the same name, as PostHog's person_distinct_id2:
// one row per write, the highest `version` wins, `is_deleted` marks a mapping that is gone; each row
// also carries its person's created_at (0004), which decides lifecycle buckets.
//
// On a cluster the same tables are created ON CLUSTER, each as a Replicated engine on every shard
// with a Distributed table in front for reads and inserts:
//   CREATE TABLE sharded_events ON CLUSTER '{cluster}' (…same columns…)
//     ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/analytics.events', '{replica}', _inserted_at)
//     PARTITION BY toYYYYMM(timestamp) ORDER BY (project_id, toDate(timestamp), event, cityHash64(distinct_id), cityHash64(uuid));
//   CREATE TABLE events ON CLUSTER '{cluster}' AS sharded_events
//     ENGINE = Distributed('{cluster}', currentDatabase(), sharded_events, sipHash64(distinct_id));
//   CREATE TABLE person_distinct_id ON CLUSTER '{cluster}' (…same columns…)
//     ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/noshard/analytics.person_distinct_id', '{replica}-{shard}', version)
//     ORDER BY (project_id, distinct_id);   -- on every node (one shard): the join is local
// Sharding events by distinct id keeps one distinct id's events on one shard; the mapping is
// replicated everywhere, so funnels join locally and merge per person across shards. Replicated
// tables deduplicate inserts by block (and by insert_deduplication_token) without further settings.
// A Distributed table takes no DELETE: on a cluster the deletion runs
// `DELETE FROM sharded_events ON CLUSTER '{cluster}' WHERE …` (the same predicate, once per batch).
// Not built yet: this file creates the single-server tables; the cluster variant is by hand.

export interface ClickHouseMigration {
  name: string;
  statements: (database: string) => string[];
}

export const CLICKHOUSE_MIGRATIONS: ClickHouseMigration[] = [
  {
    name: '0001-events',
    statements: (db) => [
      `CREATE TABLE IF NOT EXISTS ${db}.events (
         uuid UUID,
         project_id Int64,
         event String,
         distinct_id String,
         person_id Nullable(UUID),
         properties String,
         timestamp DateTime64(6, 'UTC'),
         created_at DateTime64(6, 'UTC'),
         _inserted_at DateTime64(6, 'UTC') DEFAULT now64(6)
       ) ENGINE = ReplacingMergeTree(_inserted_at)
       PARTITION BY toYYYYMM(timestamp)
       ORDER BY (project_id, toDate(timestamp), event, cityHash64(distinct_id), cityHash64(uuid))
       SETTINGS non_replicated_deduplication_window = 1000`,
    ],
  },
  {
    name: '0002-person-distinct-id',
    statements: (db) => [
      `CREATE TABLE IF NOT EXISTS ${db}.person_distinct_id (
         project_id Int64,
         distinct_id String,
         person_id Int64,
         is_deleted UInt8,
         version Int64
       ) ENGINE = ReplacingMergeTree(version)
       ORDER BY (project_id, distinct_id)`,
    ],
  },
  {
    // Where retention moves a month of events that goes whole (MOVE PARTITION needs a table of the
    // same structure, engine and partition key); empty between runs.
    name: '0003-events-retention',
    statements: (db) => [`CREATE TABLE IF NOT EXISTS ${db}.events_retention AS ${db}.events`],
  },
  {
    // Each mapping carries its person's created_at, so a lifecycle day is one statement here. Rows
    // written before take the epoch; the shipper mirrors every project whole once more (PostgreSQL's
    // migration 0064 asks it to), which writes each mapping again with its person's creation.
    name: '0004-person-created-at',
    statements: (db) => [
      `ALTER TABLE ${db}.person_distinct_id ADD COLUMN IF NOT EXISTS person_created_at DateTime64(6, 'UTC') DEFAULT 0 AFTER person_id`,
    ],
  },
];
