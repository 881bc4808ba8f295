// Migrations are listed here explicitly (no folder scanning), in the order they run.
// Add a new file as NNNN-what.ts and append it below.
import { Migration0001Foundation } from './0001-foundation.ts';
import { Migration0002CoreDataModel } from './0002-core-data-model.ts';
import { Migration0009FlagHashKeyOverrides } from './0009-flag-hash-key-overrides.ts';
import { Migration0010EventDedupPerProject } from './0010-event-dedup-per-project.ts';
import { Migration0011FilterHelpers } from './0011-filter-helpers.ts';
import { Migration0012DeletionScheduling } from './0012-deletion-scheduling.ts';
import { Migration0013EventDefinitionEnterprise } from './0013-event-definition-enterprise.ts';
import { Migration0014Experiments } from './0014-experiments.ts';
import { Migration0015PersonNameSearch } from './0015-person-name-search.ts';
import { Migration0016DeletionBatches } from './0016-deletion-batches.ts';
import { Migration0017AuthChangeNotifications } from './0017-auth-change-notifications.ts';
import { Migration0018PersonSearchIndexes } from './0018-person-search-indexes.ts';
import { Migration0019EventMonthPartitions } from './0019-event-month-partitions.ts';
import { Migration0020DeletionRetries } from './0020-deletion-retries.ts';
import { Migration0021DatabaseSettings } from './0021-database-settings.ts';
import { Migration0022JobSchedules } from './0022-job-schedules.ts';
import { Migration0023FlagDefinitionNotifications } from './0023-flag-definition-notifications.ts';
import { Migration0030EventProjectTimeIndex } from './0030-event-project-time-index.ts';
import { Migration0040PersonSearchByProject } from './0040-person-search-by-project.ts';
import { Migration0041TryNumericWithoutException } from './0041-try-numeric-without-exception.ts';
import { Migration0042TryNumericWithoutNan } from './0042-try-numeric-without-nan.ts';
import { Migration0043IsoTimestampUtc } from './0043-iso-timestamp-utc.ts';
import { Migration0044IngestionWarnings } from './0044-ingestion-warnings.ts';
import { Migration0045EventShipping } from './0045-event-shipping.ts';

export const migrationsList = [
  { name: '0001-foundation', class: Migration0001Foundation },
  { name: '0002-core-data-model', class: Migration0002CoreDataModel },
  { name: '0009-flag-hash-key-overrides', class: Migration0009FlagHashKeyOverrides },
  { name: '0010-event-dedup-per-project', class: Migration0010EventDedupPerProject },
  { name: '0011-filter-helpers', class: Migration0011FilterHelpers },
  { name: '0012-deletion-scheduling', class: Migration0012DeletionScheduling },
  { name: '0013-event-definition-enterprise', class: Migration0013EventDefinitionEnterprise },
  { name: '0014-experiments', class: Migration0014Experiments },
  { name: '0015-person-name-search', class: Migration0015PersonNameSearch },
  { name: '0016-deletion-batches', class: Migration0016DeletionBatches },
  { name: '0017-auth-change-notifications', class: Migration0017AuthChangeNotifications },
  { name: '0018-person-search-indexes', class: Migration0018PersonSearchIndexes },
  { name: '0019-event-month-partitions', class: Migration0019EventMonthPartitions },
  { name: '0020-deletion-retries', class: Migration0020DeletionRetries },
  { name: '0021-database-settings', class: Migration0021DatabaseSettings },
  { name: '0022-job-schedules', class: Migration0022JobSchedules },
  { name: '0023-flag-definition-notifications', class: Migration0023FlagDefinitionNotifications },
  { name: '0030-event-project-time-index', class: Migration0030EventProjectTimeIndex },
  { name: '0040-person-search-by-project', class: Migration0040PersonSearchByProject },
  { name: '0041-try-numeric-without-exception', class: Migration0041TryNumericWithoutException },
  { name: '0042-try-numeric-without-nan', class: Migration0042TryNumericWithoutNan },
  { name: '0043-iso-timestamp-utc', class: Migration0043IsoTimestampUtc },
  { name: '0044-ingestion-warnings', class: Migration0044IngestionWarnings },
  { name: '0045-event-shipping', class: Migration0045EventShipping },
];
