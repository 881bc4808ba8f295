import { defineConfig } from 'vitest/config';

// Set here (not in test.env) so the global setup and every test process see the same values.
process.env.NODE_ENV = 'test';
process.env.DATABASE_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/analytics_test';
process.env.REDIS_PREFIX = process.env.TEST_REDIS_PREFIX ?? 'analytics-test';
process.env.VALIDATE_RESPONSES = '1'; // every response is checked against its documented schema

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 120_000, // an API process may take 90 s to start at load 15 (test/services.ts)
    pool: 'forks',
    // Test files reuse their worker process (each starts its own API, database rows and Redis prefix):
    // per-file isolation cost ~0.5 s of spawning and module loading per file, 18% of a run.
    isolate: false,
  },
});
