// Where the tests' chDB engines keep their data (test/clickhouse.ts), and the clean-up of what earlier
// runs left there (test/global-setup.ts). Apart from test/clickhouse.ts so that the global set-up does
// not load the engine's library (seconds) to tidy a directory.
import { readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const CHDB_DIRECTORY_PREFIX = 'analytics-chdb-';

/**
 * Removes the chDB directories earlier runs left in the temporary directory (a test process never
 * closes its engine, so it cannot remove its own: about 20 MB a process, every run). Only those
 * untouched for `olderThanMs`, so a suite running beside this one keeps its own.
 */
export function removeStaleChdbDirectories(olderThanMs = 6 * 3600_000): number {
  let removed = 0;
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith(CHDB_DIRECTORY_PREFIX)) continue;
    const path = join(tmpdir(), name);
    try {
      if (Date.now() - statSync(path).mtimeMs < olderThanMs) continue;
      rmSync(path, { recursive: true, force: true });
      removed++;
    } catch {
      // gone meanwhile, or not ours to remove: leave it
    }
  }
  return removed;
}
