import { Migration } from '@mikro-orm/migrations';

/**
 * A GIN index takes new entries into a pending list that every scan reads in full, and only VACUUM
 * (or an insert that finds the list over gin_pending_list_limit, 4 MB by default) merges it. At a
 * full list a person search spent ~15 ms per index reading it. A 256 kB limit keeps that read
 * under a millisecond; inserts merge smaller lists more often, about the same work in all.
 * The name index also held an entry for every person without a name (most of them): it now covers
 * only persons with one. `ilike` cannot match a null, so the planner still uses it for search.
 */
export class Migration0018PersonSearchIndexes extends Migration {
  override name = '0018-person-search-indexes';

  override up(): void {
    this.addSql(`drop index if exists person_name_trgm`);
    this.addSql(
      `create index person_name_trgm on person using gin ((properties->>'name') gin_trgm_ops) with (gin_pending_list_limit = 256) where (properties->>'name') is not null`,
    );
    for (const index of ['person_email_trgm', 'person_properties_gin', 'event_definition_name_trgm']) {
      this.addSql(`alter index ${index} set (gin_pending_list_limit = 256)`);
      this.addSql(`select gin_clean_pending_list('${index}'::regclass)`);
    }
  }
}
