// `npm run migrate`: creates the database when it does not exist yet and applies pending migrations
// to DATABASE_URL (the one command, with `npm start` and `npm run bootstrap`, that changes the schema).
import { config } from '../shared/platform/config.ts';
import { ensureDatabase } from '../shared/platform/db/ensure-database.ts';
import { initOrm, migrate } from '../shared/platform/db/orm.ts';
import { createEventStore } from '../shared/events/index.ts';

await ensureDatabase(config.databaseDirectUrl);
const orm = await initOrm();
try {
  const applied = await migrate(orm);
  console.log(applied.length ? `applied: ${applied.join(', ')}` : 'database is up to date');
  // With EVENT_STORE=clickhouse, the ClickHouse event store's own migrations too.
  const events = createEventStore(config, orm);
  if ('migrate' in events && typeof events.migrate === 'function') {
    const done: string[] = await events.migrate();
    console.log(done.length ? `ClickHouse applied: ${done.join(', ')}` : 'ClickHouse is up to date');
  }
  await events.close();
} finally {
  await orm.close();
}
