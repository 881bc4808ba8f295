// The house's rules (issue #44; ../shared/ENGINEERING.md "Layout"), counted by the same script anyone runs
// (`npm run -s architecture`): features are reached through their index.ts only, no SQL in api/ or
// worker/, no folder-level import cycle under shared/, the platform knows no feature.
import { describe, expect, it } from 'vitest';
import { measure } from '../../scripts/architecture.ts';

const found = measure();

describe('layering', () => {
  it.each([
    'api_inside_imports',
    'worker_sql_files',
    'api_sql_files',
    'cross_feature_inside',
    'shared_folder_cycles',
    'platform_feature_imports',
  ] as const)('%s: none', (rule) => {
    expect(found[rule]).toEqual([]);
  });

  it('every table is written from one folder', () => {
    expect(found.tables_written_from_several_modules).toEqual([]);
  });
});
