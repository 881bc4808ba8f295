// `npm run migrate`: applies pending migrations to DATABASE_URL.
import { initOrm, migrate } from './orm.ts';

const orm = await initOrm();
try {
  const applied = await migrate(orm);
  console.log(applied.length ? `applied: ${applied.join(', ')}` : 'database is up to date');
} finally {
  await orm.close();
}
