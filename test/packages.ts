// Debian packages some tests start (scripts/ensure-test-packages.sh installs them). Where one could not
// be installed (no root, no mirror, a held apt lock that never freed), the tests that need it are
// skipped by name and the run says so; under CI=true the global setup fails instead.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { CHROMIUM_PATH } from './browser.ts';

const onPath = (command: string) => spawnSync('sh', ['-c', `command -v ${command}`]).status === 0;

/** Each package: its Debian name and whether it is on this machine now. */
export const TEST_PACKAGES = {
  chromium: { debian: 'chromium', present: () => existsSync(CHROMIUM_PATH) },
  pgbouncer: { debian: 'pgbouncer', present: () => existsSync('/usr/sbin/pgbouncer') || onPath('pgbouncer') },
  promtool: { debian: 'prometheus', present: () => onPath('promtool') },
  dockerCompose: { debian: 'docker-compose', present: () => onPath('docker-compose') },
} as const;

export type TestPackage = keyof typeof TEST_PACKAGES;

const seen = new Map<TestPackage, boolean>();
/** Whether the package is missing here (asked once per process). */
export function missingPackage(name: TestPackage): boolean {
  if (!seen.has(name)) seen.set(name, !TEST_PACKAGES[name].present());
  return seen.get(name)!;
}

/** The Debian packages missing on this machine. */
export const missingPackages = (): string[] =>
  (Object.keys(TEST_PACKAGES) as TestPackage[]).filter(missingPackage).map((name) => TEST_PACKAGES[name].debian);
