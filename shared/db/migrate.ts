// `npm run migrate`: creates the database when it does not exist yet and applies pending migrations
// to DATABASE_URL (the one command, with `npm start` and `npm run bootstrap`, that changes the schema).
import { config } from '../config.ts';
import { ensureDatabase } from './ensure-database.ts';
import { initOrm, migrate } from './orm.ts';

await ensureDatabase(config.databaseDirectUrl);
const orm = await initOrm();
try {
  const applied = await migrate(orm);
  console.log(applied.length ? `applied: ${applied.join(', ')}` : 'database is up to date');
} finally {
  await orm.close();
}
