import { Migration } from '@mikro-orm/migrations';

/** Person search matches name as well as email by substring: a trigram index for each. */
export class Migration0015PersonNameSearch extends Migration {
  override name = '0015-person-name-search';

  override up(): void {
    this.addSql(`create index if not exists person_name_trgm on person using gin ((properties->>'name') gin_trgm_ops)`);
  }
}
