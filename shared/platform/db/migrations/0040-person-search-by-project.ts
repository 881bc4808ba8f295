import { Migration } from '@mikro-orm/migrations';

/**
 * Person search (and icontains) on email and name through trigram GIN indexes that lead with the project
 * (btree_gin), so a search costs what its project holds, not the table. The old indexes (text only)
 * found a broad term's matches in every project and rechecked each of them.
 */
export class Migration0040PersonSearchByProject extends Migration {
  override name = '0040-person-search-by-project';

  override up(): void {
    this.addSql(`create extension if not exists btree_gin`);
    this.addSql(`drop index if exists person_email_trgm`);
    this.addSql(
      `create index person_email_trgm on person using gin (project_id, (properties->>'email') gin_trgm_ops) with (gin_pending_list_limit = 256)`,
    );
    this.addSql(`drop index if exists person_name_trgm`);
    this.addSql(
      `create index person_name_trgm on person using gin (project_id, (properties->>'name') gin_trgm_ops) with (gin_pending_list_limit = 256) where (properties->>'name') is not null`,
    );
  }
}
