// Once per run: PostgreSQL and Redis answer (started when installed but stopped), Chromium is there
// for the browser tests, and the test database exists and is migrated — so `npm ci && npm test` works
// on a fresh machine by itself. Each test file then makes its own organization/project/user/key, so
// files never see each other's data and can run in parallel. ChDB directories earlier runs left in
// the temporary directory are removed (test/chdb-directories.ts).
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ensureDatabase } from '../shared/platform/db/ensure-database.ts';
import { initOrm, migrate } from '../shared/platform/db/orm.ts';
import { removeStaleChdbDirectories } from './chdb-directories.ts';
import { missingPackages } from './packages.ts';

const root = fileURLToPath(new URL('..', import.meta.url));

export default async function setup() {
  for (const script of ['scripts/ensure-services.sh', 'scripts/ensure-test-packages.sh']) {
    execFileSync('bash', [script], { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] });
  }
  const missing = missingPackages();
  if (missing.length > 0)
    console.warn(`Skipping the tests that need the Debian packages ${missing.join(', ')} (not installed here).`);
  removeStaleChdbDirectories();
  const url = process.env.DATABASE_URL!;
  await ensureDatabase(url);
  const orm = await initOrm(url);
  try {
    await migrate(orm, url);
  } finally {
    await orm.close();
  }
}
