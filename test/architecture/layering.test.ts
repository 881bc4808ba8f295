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

  it('tables written from more than one folder: only these, known and not to grow', () => {
    // Capture writes persons, their distinct ids, flag overrides and recordings in its own statements
    // (the ingestion hot path); moving those writes into their features is the next step.
    expect(found.tables_written_from_several_modules).toEqual([
      'feature_flag_hash_key_override: shared/flags, shared/ingestion',
      'person: shared/ingestion, shared/persons',
      'person_distinct_id: shared/ingestion, shared/persons',
      'session_recording: shared/deletions, shared/ingestion, shared/retention',
      'session_recording_snapshot: shared/deletions, shared/ingestion, shared/retention',
    ]);
  });
});
