// Creates and migrates the test database once per run. Each test file then makes its own
// organization/project/user/key, so files never see each other's data and can run in parallel.
import { ensureDatabase } from '../shared/db/ensure-database.ts';
import { initOrm, migrate } from '../shared/db/orm.ts';

export default async function setup() {
  const url = process.env.DATABASE_URL!;
  await ensureDatabase(url);
  const orm = await initOrm(url);
  try {
    await migrate(orm, url);
  } finally {
    await orm.close();
  }
}
